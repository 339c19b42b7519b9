#include "mm/tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <nlohmann/json.hpp>

#include "mm/core/error.h"
#include "mm/tokenizer/byte_level.h"
#include "mm/tokenizer/unicode_text.h"

namespace mm {

namespace {

// GPT-2's pattern, used by the ByteLevel pre-tokenizer when use_regex is true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// `\s` and `\S` with Oniguruma's meaning (see the header).
std::string with_oniguruma_spaces(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's') {
        out += "\\p{White_Space}";
      } else if (next == 'S') {
        out += "\\P{White_Space}";
      } else {
        out += '\\';
        out += next;
      }
    } else {
      out += pattern[i];
    }
  }
  return out;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

// Per-thread match state, shared by every regex: only the whole-match offsets are read.
struct MatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
  MatchState() {
    MM_CHECK(data && context && jit_stack, "PCRE2: out of memory");
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~MatchState() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

}  // namespace

class Pcre2Regex {
 public:
  Pcre2Regex(const std::string& pattern, bool literal, const std::string& where) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    const std::string source = literal ? pattern : with_oniguruma_spaces(pattern);
    const uint32_t options = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(), options,
                          &error, &offset, nullptr);
    MM_CHECK(code_, where, ": cannot compile the regex ", nlohmann::json(pattern).dump(), ": ",
             pcre2_message(error), " at offset ", offset);
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // without JIT it still works, only slower
  }
  ~Pcre2Regex() { pcre2_code_free(code_); }
  Pcre2Regex(const Pcre2Regex&) = delete;
  Pcre2Regex& operator=(const Pcre2Regex&) = delete;

  // Byte ranges of the successive non-overlapping matches in `text` (valid UTF-8).
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const {
    thread_local MatchState state;
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t offset = 0;
    while (offset <= text.size()) {
      const int rc = pcre2_match(code_, subject, text.size(), offset, PCRE2_NO_UTF_CHECK,
                                 state.data, state.context);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      MM_CHECK(rc >= 0, "tokenizer regex: matching failed: ", pcre2_message(rc));
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
      matches.emplace_back(ovector[0], ovector[1]);
      if (ovector[1] > ovector[0]) {
        offset = ovector[1];
      } else if (ovector[1] < text.size()) {  // an empty match: step over one character
        size_t next = ovector[1];
        unicode::next_code_point(text, next);
        offset = next;
      } else {
        break;
      }
    }
  }

 private:
  pcre2_code* code_ = nullptr;
};

PreTokenizer PreTokenizer::from_json(const nlohmann::json& spec, const std::string& where) {
  PreTokenizer pre;
  if (!spec.is_null()) pre.add(spec, where);
  return pre;
}

void PreTokenizer::add(const nlohmann::json& spec, const std::string& where) {
  MM_CHECK(spec.is_object() && spec.contains("type") && spec["type"].is_string(), where,
           ": expected an object with a \"type\"");
  const std::string type = spec["type"].get<std::string>();
  auto flag = [&](const char* key, bool fallback) {
    if (!spec.contains(key) || spec[key].is_null()) return fallback;
    MM_CHECK(spec[key].is_boolean(), where, ".", key, ": expected true or false");
    return spec[key].get<bool>();
  };
  if (type == "Sequence") {
    MM_CHECK(spec.contains("pretokenizers") && spec["pretokenizers"].is_array(), where,
             ".pretokenizers: expected an array");
    for (size_t i = 0; i < spec["pretokenizers"].size(); ++i) {
      add(spec["pretokenizers"][i], str_cat(where, ".pretokenizers[", i, "]"));
    }
  } else if (type == "Split") {
    Step step;
    step.kind = Step::Kind::split;
    MM_CHECK(spec.contains("pattern") && spec["pattern"].is_object(), where,
             ".pattern: expected {\"Regex\": ...} or {\"String\": ...}");
    const auto& pattern = spec["pattern"];
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      step.regex = std::make_shared<Pcre2Regex>(pattern["Regex"].get<std::string>(), false, where + ".pattern");
    } else if (pattern.contains("String") && pattern["String"].is_string()) {
      step.regex = std::make_shared<Pcre2Regex>(pattern["String"].get<std::string>(), true, where + ".pattern");
    } else {
      fail(where, ".pattern: expected {\"Regex\": ...} or {\"String\": ...}, got ", pattern.dump());
    }
    std::string behavior = "Isolated";
    if (spec.contains("behavior")) {
      MM_CHECK(spec["behavior"].is_string(), where, ".behavior: expected a string");
      behavior = spec["behavior"].get<std::string>();
    }
    MM_CHECK(behavior == "Isolated" || behavior == "Removed", where, ".behavior: unsupported \"",
             behavior, "\" (supported: Isolated, Removed)");
    step.keep_matches = behavior == "Isolated";
    MM_CHECK(!flag("invert", false), where, ".invert: true is not supported");
    steps_.push_back(std::move(step));
  } else if (type == "ByteLevel") {
    Step step;
    step.kind = Step::Kind::byte_level;
    step.add_prefix_space = flag("add_prefix_space", true);
    if (flag("use_regex", true)) step.regex = std::make_shared<Pcre2Regex>(kGpt2Pattern, false, where);
    steps_.push_back(std::move(step));
  } else {
    fail(where, ".type: unsupported pre-tokenizer \"", type,
         "\" (supported: null, Split, ByteLevel, Sequence of these)");
  }
}

void PreTokenizer::split(std::string_view text, std::vector<std::string>& words) const {
  if (!text.empty()) apply(0, text, words);
}

void PreTokenizer::apply(size_t index, std::string_view piece, std::vector<std::string>& words) const {
  if (index == steps_.size()) {
    words.emplace_back(piece);
    return;
  }
  const Step& step = steps_[index];
  std::vector<std::pair<size_t, size_t>> matches;
  if (step.kind == Step::Kind::split) {
    step.regex->find_all(piece, matches);
    size_t done = 0;
    for (auto [begin, end] : matches) {
      if (begin > done) apply(index + 1, piece.substr(done, begin - done), words);
      if (step.keep_matches && end > begin) apply(index + 1, piece.substr(begin, end - begin), words);
      done = end;
    }
    if (done < piece.size()) apply(index + 1, piece.substr(done), words);
    return;
  }
  std::string prefixed;
  if (step.add_prefix_space && piece.front() != ' ') {
    prefixed = " ";
    prefixed += piece;
    piece = prefixed;
  }
  std::string mapped;
  auto emit = [&](std::string_view part) {
    mapped.clear();
    byte_level::append_mapped(part, mapped);
    apply(index + 1, mapped, words);
  };
  if (!step.regex) {
    emit(piece);
    return;
  }
  step.regex->find_all(piece, matches);
  size_t done = 0;
  for (auto [begin, end] : matches) {
    if (begin > done) emit(piece.substr(done, begin - done));
    if (end > begin) emit(piece.substr(begin, end - begin));
    done = end;
  }
  if (done < piece.size()) emit(piece.substr(done));
}

}  // namespace mm
