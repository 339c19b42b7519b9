// The Jinja interpreter: published Qwen chat templates and the language's pieces rendered byte
// for byte as transformers' apply_chat_template renders them (oracle: jinja_chat_templates.py),
// and the errors for what it refuses.
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "mm/tokenizer/jinja_template.h"
#include "unit/testing.h"

namespace mm {
namespace {

using ojson = nlohmann::ordered_json;

ojson load_cases() {
  const auto path = testing::golden_dir("jinja_chat_templates") / "cases.json";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "missing " << path << " (run the oracle_jinja_chat_templates test first)";
  if (!in.good()) return ojson::object();
  return ojson::parse(in);
}

std::string render(const std::string& source, const ojson& context = ojson::object()) {
  return JinjaTemplate(source, "test.jinja").render(context);
}

// Where two renderings first differ, with some context, for a readable failure.
std::string first_difference(const std::string& got, const std::string& want) {
  size_t k = 0;
  while (k < got.size() && k < want.size() && got[k] == want[k]) ++k;
  const size_t from = k > 40 ? k - 40 : 0;
  return "first difference at byte " + std::to_string(k) + "\n  got:  " + ojson(got.substr(from, 120)).dump() +
         "\n  want: " + ojson(want.substr(from, 120)).dump();
}

TEST(JinjaParity, RendersEveryCaseLikeTransformers) {
  const ojson golden = load_cases();
  if (!golden.contains("cases")) return;
  std::map<std::string, JinjaTemplate> compiled;
  std::map<std::string, int> passed, total;
  for (const auto& c : golden["cases"]) {
    const std::string name = c["template"].get<std::string>();
    auto it = compiled.find(name);
    if (it == compiled.end())
      it = compiled.emplace(name, JinjaTemplate(golden["templates"][name].get<std::string>(), name)).first;
    ++total[name];
    const std::string want = c["expected"].get<std::string>();
    try {
      const std::string got = it->second.render(c["context"]);
      if (got == want) ++passed[name];
      else ADD_FAILURE() << name << " / " << c["name"].get<std::string>() << ": " << first_difference(got, want);
    } catch (const Error& e) {
      ADD_FAILURE() << name << " / " << c["name"].get<std::string>() << ": threw " << e.what();
    }
  }
  for (const auto& [name, n] : total) {
    std::printf("  %-36s %3d/%3d cases identical\n", name.c_str(), passed[name], n);
    EXPECT_EQ(passed[name], n) << name;
  }
  // The published templates each carry many conversations; the language pieces one each.
  for (const char* published : {"qwen2_vl", "qwen3_vl_instruct", "qwen3_vl_thinking", "qwen3", "qwen3_8", "qwen3_5"}) EXPECT_GE(total[published], 40) << published;
}

TEST(JinjaParity, FailsWhereJinja2Fails) {
  const ojson golden = load_cases();
  if (!golden.contains("errors")) return;
  EXPECT_GE(golden["errors"].size(), 10u);
  for (const auto& c : golden["errors"]) {
    const std::string name = c["name"].get<std::string>();
    const std::string message = c["message"].get<std::string>();
    try {
      JinjaTemplate(c["template"].get<std::string>(), name).render(c["context"]);
      ADD_FAILURE() << name << ": rendered, but jinja2 failed with: " << c["python_error"].get<std::string>();
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(name + ":", 0), 0u) << what;  // names the template
      EXPECT_NE(what.find(message), std::string::npos) << name << ": " << what;
    }
  }
}

TEST(JinjaTemplate, ErrorsNameTemplateLineAndColumn) {
  EXPECT_THROW_MSG(JinjaTemplate("line one\n{{ x|wordwrap }}", "Qwen3-VL-8B/chat_template.jinja"),
                   "Qwen3-VL-8B/chat_template.jinja:2:5: unsupported filter 'wordwrap'");
  EXPECT_THROW_MSG(JinjaTemplate("\n\n  {% if x is frobbed %}{% endif %}", "t"), "t:3:11: unsupported test 'frobbed'");
  EXPECT_THROW_MSG(JinjaTemplate("{% include 'other.jinja' %}", "t"), "t:1:4: unsupported tag 'include'");
  EXPECT_THROW_MSG(JinjaTemplate("{% for x in y %}", "t"), "t:1:17: unexpected end of template, expected 'else' or 'endfor'");
  EXPECT_THROW_MSG(JinjaTemplate("{% endif %}", "t"), "unexpected 'endif' with no open block");
  EXPECT_THROW_MSG(JinjaTemplate("{{ 1 + }}", "t"), "t:1:8: unexpected end of tag '}}' in expression");
  EXPECT_THROW_MSG(JinjaTemplate("ok\n{{ 'open", "t"), "t:2:4: unterminated string literal");
  EXPECT_THROW_MSG(JinjaTemplate("{# never closed", "t"), "t:1:1: unclosed comment");
  EXPECT_THROW_MSG(JinjaTemplate("{{ x ", "t"), "unclosed variable tag");
  EXPECT_THROW_MSG(JinjaTemplate("{{ a ; b }}", "t"), "t:1:6: unexpected character ';'");
  EXPECT_THROW_MSG(JinjaTemplate("{% break %}", "t"), "'break' outside a loop");
  EXPECT_THROW_MSG(JinjaTemplate("{% for x in y recursive %}{% endfor %}", "t"), "unsupported: recursive for loops");
  EXPECT_THROW_MSG(JinjaTemplate("{{ f(*args) }}", "t"), "unsupported: *args");
  EXPECT_THROW_MSG(render("{{ '%s' % 1 }}"), "printf-style string formatting");
  EXPECT_THROW_MSG(render("a\n{{ raise_exception('bad role') }}"), "test.jinja:2:4: raise_exception: bad role");
  EXPECT_THROW_MSG(render("{{ 1 // 0 }}"), "division or modulo by zero");
  EXPECT_THROW_MSG(render("{{ messages.x }}"), "'messages' is undefined");
  EXPECT_THROW_MSG(render("{{ 'abc'.format(1) }}"), "unsupported: str.format()");
  EXPECT_THROW_MSG(render("{% set d = {} %}{{ d.update({'a': 1}) }}"), "not allowed");
  EXPECT_THROW_MSG(render("{% set a, b = [1] %}"), "not enough values to unpack");
}

TEST(JinjaTemplate, BoundsRecursionNestingAndSizes) {
  EXPECT_THROW_MSG(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), "macro calls nested deeper than 100");
  EXPECT_THROW_MSG(JinjaTemplate("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}", "t"), "nested too deeply");
  std::string nested_ifs;
  for (int k = 0; k < 1000; ++k) nested_ifs += "{% if true %}";
  EXPECT_THROW_MSG(JinjaTemplate(nested_ifs, "t"), "nested too deeply");
  EXPECT_THROW_MSG(render("{% for x in range(1000000) %}{% endfor %}"), "range too big");
  EXPECT_THROW_MSG(render("{{ 'x' * 1000000000000 }}"), "too large");
  EXPECT_THROW_MSG(render("{{ 2 ** 200 }}"), "integer overflow");
  // A macro recursing through expressions and blocks nested as deep as the parser allows stops on
  // the combined render depth, well inside the stack.
  std::string deep = "{% macro f(n) %}";
  for (int k = 0; k < 50; ++k) deep += "{% if true %}";
  deep += "{{ ";
  for (int k = 0; k < 30; ++k) deep += "0 + (";
  deep += "f(n + 1)" + std::string(30, ')') + " }}";
  for (int k = 0; k < 50; ++k) deep += "{% endif %}";
  deep += "{% endmacro %}{{ f(0) }}";
  EXPECT_THROW_MSG(render(deep), "blocks, expressions and macro calls nested deeper than 1000");
  // A recursive macro within the limit is fine.
  EXPECT_EQ(render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(30)|length }}"), "51");
}

TEST(JinjaTemplate, StrftimeNowReadsTheFixedTime) {
  // 2025-01-02 03:04:05 UTC
  ojson context = {{"__now__", 1735787045}};
  EXPECT_EQ(render("{{ strftime_now('%Y-%m-%d %H:%M:%S') }}|{{ strftime_now('%d %b %Y') }}", context),
            "2025-01-02 03:04:05|02 Jan 2025");
  EXPECT_THROW_MSG(render("x", ojson{{"__now__", "today"}}), "__now__ must be an integer");
  EXPECT_EQ(render("{{ strftime_now('%Y')|length }}"), "4");  // local time now
}

TEST(JinjaTemplate, ContextFromPlainJsonAndOrderedJson) {
  const JinjaTemplate t("{{ tool|tojson }}", "t");
  EXPECT_EQ(t.render(ojson::parse(R"({"tool": {"b": 1, "a": [true, null, 0.5]}})")), R"({"b": 1, "a": [true, null, 0.5]})");
  // A plain nlohmann::json sorts its keys; the values are the same.
  EXPECT_EQ(t.render(nlohmann::json::parse(R"({"tool": {"b": 1, "a": 2}})")), R"({"a": 2, "b": 1})");
  EXPECT_THROW_MSG(t.render(ojson::array()), "t: the context of a template must be a JSON object");
}

TEST(JinjaTemplate, WhitespaceControlPieces) {
  EXPECT_EQ(render("{% if true %}\nA\n{% endif %}\nB"), "A\nB");                 // trim_blocks
  EXPECT_EQ(render("  {% if true %}A{% endif %}"), "A");                          // lstrip_blocks
  EXPECT_EQ(render("x  {% if true %}A{% endif %}"), "x  A");                      // not at line start
  EXPECT_EQ(render("  {{ 'v' }}\n"), "  v");                                      // variables are not stripped; last newline dropped
  EXPECT_EQ(render("a \n {{- 'b' -}} \n c"), "abc");
  EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
  EXPECT_EQ(render("{{ {'a': {'b': 1}} }}"), "{'a': {'b': 1}}");                 // `}}` inside braces does not close
}

TEST(JinjaTemplate, PythonValueSemantics) {
  EXPECT_EQ(render("{{ 7 / 2 }} {{ 8 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ 1e-5 }} {{ 1.5e16 }} {{ 100.0 }}"),
            "3.5 4.0 3 -4 -2 1e-05 1.5e+16 100.0");
  EXPECT_EQ(render("{{ [1, 'a', none, true, {'k': (1,)}] }}"), "[1, 'a', None, True, {'k': (1,)}]");
  EXPECT_EQ(render("{{ \"it's\" }} {{ [\"it's\"] }}"), "it's [\"it's\"]");
  EXPECT_EQ(render("{{ x is defined }}{{ x is none }}{{ none is none }}{{ x|default('d') }}"), "FalseFalseTrued");
  EXPECT_EQ(render("{{ 'é😀x'|length }} {{ 'é😀x'[1] }} {{ 'é😀x'[::-1] }}"), "3 😀 x😀é");
  EXPECT_EQ(render("{{ 1 == 1.0 }}{{ [1] == [1.0] }}{{ 'a' < 'b' }}{{ 0.1 + 0.2 }}"), "TrueTrueTrue0.30000000000000004");
}


// Every prefix of every template in the goldens, and each with one character flipped, either
// renders or fails with mm::Error: no crash, no other exception.
TEST(JinjaTemplate, MangledTemplatesFailCleanly) {
  const ojson golden = load_cases();
  if (!golden.contains("templates")) return;
  const ojson context = golden["cases"][0]["context"];
  int rendered = 0, refused = 0;
  const auto attempt = [&](const std::string& source) {
    try {
      JinjaTemplate(source, "mangled").render(context);
      ++rendered;
    } catch (const Error&) {
      ++refused;
    }
  };
  for (const auto& [name, text] : golden["templates"].items()) {
    const std::string source = text.get<std::string>();
    for (size_t cut = 0; cut <= source.size(); cut += 3) attempt(source.substr(0, cut));
    for (size_t at = 0; at < source.size(); at += 5) {
      std::string flipped = source;
      flipped[at] = "{}%#-+()[]'\"|.:,=~ \n"[at % 21];
      attempt(flipped);
    }
  }
  EXPECT_GT(rendered, 0);
  EXPECT_GT(refused, 0);
  EXPECT_THROW_MSG(render("{{ x.99999999999999999999999 }}"), "index out of range");
  EXPECT_EQ(render("{{ 1e999 }} {{ '0x10'|int }} {{ '1e3'|float }}"), "inf 0 1000.0");
  EXPECT_EQ(render("{% for x in 'ab' %}{{ loop.cycle('odd', 'even') }}{% endfor %}"), "oddeven");
  EXPECT_EQ(render("{{ range(0, 9223372036854775807, 4611686018427387904)|length }}"), "2");
}

}  // namespace
}  // namespace mm
