#include "mm/tokenizer/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "mm/tokenizer/jinja_str.h"

namespace mm::jinja {
namespace {

// Reads positional-or-keyword parameters as a Python signature `name(p0, p1=..., ...)` would,
// refusing extra or unknown arguments.
class Params {
 public:
  Params(Args& args, std::string what, std::vector<std::string> names)
      : args_(args), what_(std::move(what)), names_(std::move(names)) {
    if (args_.positional.size() > names_.size())
      throw Failure(what_ + " takes at most " + std::to_string(names_.size()) + " argument(s), got " +
                    std::to_string(args_.positional.size()));
    for (const auto& [key, v] : args_.keywords) {
      const auto it = std::find(names_.begin(), names_.end(), key);
      if (it == names_.end()) throw Failure(what_ + " got an unexpected keyword argument '" + key + "'");
      if (static_cast<size_t>(it - names_.begin()) < args_.positional.size())
        throw Failure(what_ + " got multiple values for argument '" + key + "'");
    }
  }
  bool has(size_t i) const { return find(i) != nullptr; }
  Value get(size_t i, Value fallback = Value::undefined()) const {
    const Value* v = find(i);
    return v ? *v : fallback;
  }
  std::string get_string(size_t i, std::string fallback) const {
    const Value* v = find(i);
    if (!v || v->is_none()) return fallback;
    if (!v->is_string()) throw Failure(what_ + ": argument '" + names_[i] + "' must be a string, got " + v->type_name());
    return v->s;
  }
  std::int64_t get_int(size_t i, std::int64_t fallback) const {
    const Value* v = find(i);
    if (!v || v->is_none()) return fallback;
    if (v->kind == Value::Kind::boolean) return v->b;
    if (v->kind != Value::Kind::integer) throw Failure(what_ + ": argument '" + names_[i] + "' must be an integer, got " + v->type_name());
    return v->i;
  }
  bool get_bool(size_t i, bool fallback) const {
    const Value* v = find(i);
    return v ? v->truthy() : fallback;
  }

 private:
  const Value* find(size_t i) const {
    if (i < args_.positional.size()) return &args_.positional[i];
    for (const auto& [key, v] : args_.keywords)
      if (key == names_[i]) return &v;
    return nullptr;
  }
  Args& args_;
  std::string what_;
  std::vector<std::string> names_;
};

// Extra positional arguments after the named ones (select's test arguments).
Args rest_args(const Args& args, size_t from) {
  Args rest;
  for (size_t k = from; k < args.positional.size(); ++k) rest.positional.push_back(args.positional[k]);
  rest.keywords = args.keywords;
  return rest;
}

std::string need_string(const Value& v, const std::string& what) {
  if (!v.is_string()) throw Failure(what + " needs a string, got " + v.type_name());
  return v.s;
}

// Byte offset -> code point index.
std::int64_t char_index(const std::string& s, size_t byte) { return static_cast<std::int64_t>(count_chars(s.substr(0, byte))); }

bool prefix_match(const std::string& s, const Value& prefix, bool at_end, const std::string& what) {
  const auto one = [&](const Value& p) {
    const std::string& x = need_string(p, what);
    return x.size() <= s.size() && (at_end ? s.compare(s.size() - x.size(), x.size(), x) == 0 : s.compare(0, x.size(), x) == 0);
  };
  if (prefix.is_list()) return std::any_of(prefix.items().begin(), prefix.items().end(), one);
  return one(prefix);
}

Value string_method(const std::string& s, const std::string& name) {
  const auto bind = [&](std::vector<std::string> params, std::function<Value(const std::string&, const Params&)> body) {
    return Value::function("str." + name, [s, name, params, body](Args& a) {
      return body(s, Params(a, "str." + name + "()", params));
    });
  };
  if (name == "startswith" || name == "endswith") {
    const bool at_end = name == "endswith";
    return bind({"prefix", "start", "end"}, [at_end, name](const std::string& str, const Params& p) {
      if (p.has(1) || p.has(2)) throw Failure("str." + name + "() with start/end is not supported");
      return Value::boolean(prefix_match(str, p.get(0), at_end, name));
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    return bind({"chars"}, [left, right](const std::string& str, const Params& p) { return Value::string(py_strip(str, p.get(0), left, right)); });
  }
  if (name == "split" || name == "rsplit") {
    const bool from_right = name == "rsplit";
    return bind({"sep", "maxsplit"}, [from_right](const std::string& str, const Params& p) {
      return py_split(str, p.get(0), p.get_int(1, -1), from_right);
    });
  }
  if (name == "splitlines") {
    return bind({}, [](const std::string& str, const Params&) {
      List lines;
      size_t start = 0;
      while (start < str.size()) {
        size_t at = str.find_first_of("\n\r", start);
        if (at == std::string::npos) {
          lines.push_back(Value::string(str.substr(start)));
          break;
        }
        lines.push_back(Value::string(str.substr(start, at - start)));
        start = at + ((str[at] == '\r' && at + 1 < str.size() && str[at + 1] == '\n') ? 2 : 1);
      }
      return Value::make_list(std::move(lines));
    });
  }
  if (name == "replace") {
    return bind({"old", "new", "count"}, [](const std::string& str, const Params& p) {
      return Value::string(py_replace(str, need_string(p.get(0), "replace"), need_string(p.get(1), "replace"), p.get_int(2, -1)));
    });
  }
  if (name == "upper") return bind({}, [](const std::string& str, const Params&) { return Value::string(map_case(str, to_upper)); });
  if (name == "lower") return bind({}, [](const std::string& str, const Params&) { return Value::string(map_case(str, to_lower)); });
  if (name == "title") return bind({}, [](const std::string& str, const Params&) { return Value::string(py_title(str)); });
  if (name == "capitalize") return bind({}, [](const std::string& str, const Params&) { return Value::string(capitalize(str)); });
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    const bool right = name[0] == 'r', raise = name.find("index") != std::string::npos;
    return bind({"sub", "start", "end"}, [right, raise, name](const std::string& str, const Params& p) {
      if (p.has(1) || p.has(2)) throw Failure("str." + name + "() with start/end is not supported");
      const std::string& sub = need_string(p.get(0), name);
      const size_t at = right ? str.rfind(sub) : str.find(sub);
      if (at == std::string::npos) {
        if (raise) throw Failure("substring not found");
        return Value::integer(-1);
      }
      return Value::integer(char_index(str, at));
    });
  }
  if (name == "count") {
    return bind({"sub"}, [](const std::string& str, const Params& p) {
      const std::string& sub = need_string(p.get(0), "count");
      if (sub.empty()) return Value::integer(static_cast<std::int64_t>(count_chars(str)) + 1);
      std::int64_t n = 0;
      for (size_t at = str.find(sub); at != std::string::npos; at = str.find(sub, at + sub.size())) ++n;
      return Value::integer(n);
    });
  }
  if (name == "join") {
    return bind({"iterable"}, [](const std::string& str, const Params& p) {
      std::string out;
      bool first = true;
      for (const Value& v : iterate(p.get(0))) {
        if (!first) out += str;
        out += need_string(v, "str.join()");
        first = false;
      }
      return Value::string(out);
    });
  }
  if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isalnum") {
    return bind({}, [name](const std::string& str, const Params&) {
      const std::u32string u = decode(str);
      if (u.empty()) return Value::boolean(false);
      return Value::boolean(std::all_of(u.begin(), u.end(), [&](char32_t c) {
        if (name == "isspace") return py_space(c);
        const bool digit = c >= '0' && c <= '9';
        const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c > 0x7F && is_cased_letter(c));
        return name == "isdigit" ? digit : name == "isalpha" ? alpha : digit || alpha;
      }));
    });
  }
  if (name == "format" || name == "format_map") throw Failure("unsupported: str." + name + "()");
  return Value::undefined("'str object' has no attribute '" + name + "'");
}

Value dict_method(const Value& d, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return Value::function("dict." + name, [d, name](Args& a) {
      Params(a, "dict." + name + "()", {});
      List out;
      for (const auto& [k, v] : d.dict->items) {
        if (name == "items") out.push_back(Value::make_list({Value::string(k), v}, true));
        else if (name == "keys") out.push_back(Value::string(k));
        else out.push_back(v);
      }
      return Value::make_list(std::move(out));
    });
  }
  if (name == "get") {
    return Value::function("dict.get", [d](Args& a) {
      Params p(a, "dict.get()", {"key", "default"});
      const Value key = p.get(0);
      const Value* v = key.is_string() ? d.dict->find(key.s) : nullptr;
      return v ? *v : p.get(1, Value::none());
    });
  }
  static const std::set<std::string> kMutating = {"update", "pop", "popitem", "setdefault", "clear"};
  if (kMutating.count(name)) throw Failure("dict." + name + "() is not allowed: the template environment is immutable");
  return Value::undefined();
}

std::int64_t to_index(const Value& v, const char* what) {
  if (v.kind == Value::Kind::integer) return v.i;
  if (v.kind == Value::Kind::boolean) return v.b;
  throw Failure(std::string(what) + " indices must be integers, not " + v.type_name());
}

// Attribute by a dotted path ("function.name"), for selectattr, map and sort; as jinja2's
// make_attrgetter, a `fallback` replaces an undefined result after every step.
Value attribute_path(const Value& v, const std::string& path, const Value* fallback = nullptr) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool numeric = !part.empty() && part.size() <= 18 && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = numeric ? get_item(cur, Value::integer(std::stoll(part))) : get_item(cur, Value::string(part));
    if (fallback && cur.is_undefined()) cur = *fallback;
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Value select_filter(const Value& seq, Args& args, bool by_attribute, bool keep) {
  const std::string what = std::string(keep ? "select" : "reject") + (by_attribute ? "attr" : "");
  size_t next = 0;
  std::string attr;
  if (by_attribute) {
    if (args.positional.empty()) throw Failure(what + " needs an attribute name");
    attr = need_string(args.positional[0], what);
    next = 1;
  }
  std::string test;
  if (args.positional.size() > next) test = need_string(args.positional[next], what);
  Args test_args = rest_args(args, next + 1);
  if (!test.empty() && !has_test(test)) throw Failure(what + ": unsupported test '" + test + "'");
  List out;
  for (const Value& item : iterate(seq)) {
    const Value v = by_attribute ? attribute_path(item, attr) : item;
    Args a = test_args;
    const bool ok = test.empty() ? v.truthy() : apply_test(test, v, a);
    if (ok == keep) out.push_back(item);
  }
  return Value::make_list(std::move(out));
}

Value lowered(const Value& v, bool case_sensitive) {
  return (!case_sensitive && v.is_string()) ? Value::string(map_case(v.s, to_lower)) : v;
}

}  // namespace

List iterate(const Value& value) {
  switch (value.kind) {
    case Value::Kind::list: return value.items();
    case Value::Kind::dict: {
      List keys;
      for (const auto& [k, v] : value.dict->items) keys.push_back(Value::string(k));
      return keys;
    }
    case Value::Kind::string: {
      List chars;
      for (auto& c : utf8_chars(value.s)) chars.push_back(Value::string(std::move(c)));
      return chars;
    }
    case Value::Kind::undefined: return {};
    default: throw Failure("'" + value.type_name() + "' object is not iterable");
  }
}

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind) {
    case Value::Kind::undefined:
      throw Failure(obj.s.empty() ? "undefined value has no attribute '" + name + "'" : obj.s);
    case Value::Kind::dict: {
      Value m = dict_method(obj, name);
      if (!m.is_undefined()) return m;
      const Value* v = obj.dict->find(name);
      return v ? *v : Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    case Value::Kind::name_space: {
      const Value* v = obj.dict->find(name);
      return v ? *v : Value::undefined("'Namespace' has no attribute '" + name + "'");
    }
    case Value::Kind::string: return string_method(obj.s, name);
    case Value::Kind::list: {
      static const std::set<std::string> kMutating = {"append", "extend", "insert", "pop", "remove", "sort", "reverse", "clear"};
      if (kMutating.count(name)) throw Failure("list." + name + "() is not allowed: the template environment is immutable");
      return Value::undefined("'list object' has no attribute '" + name + "'");
    }
    default: return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
  }
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind) {
    case Value::Kind::undefined: return get_attr(obj, key.str());
    case Value::Kind::dict:
    case Value::Kind::name_space: {
      if (key.is_string()) {
        const Value* v = obj.dict->find(key.s);
        if (v) return *v;
        if (obj.kind == Value::Kind::dict) {
          Value m = dict_method(obj, key.s);
          if (!m.is_undefined()) return m;
        }
      }
      return Value::undefined("'dict object' has no attribute " + key.repr());
    }
    case Value::Kind::list:
      if (key.kind == Value::Kind::integer || key.kind == Value::Kind::boolean) {
        std::int64_t i = to_index(key, "list");
        const auto n = static_cast<std::int64_t>(obj.list->size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::undefined("list index out of range");
        return (*obj.list)[static_cast<size_t>(i)];
      }
      return key.is_string() ? get_attr(obj, key.s) : Value::undefined();
    case Value::Kind::string:
      if (key.kind == Value::Kind::integer || key.kind == Value::Kind::boolean) {
        const auto chars = utf8_chars(obj.s);
        std::int64_t i = to_index(key, "string");
        const auto n = static_cast<std::int64_t>(chars.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::undefined("string index out of range");
        return Value::string(chars[static_cast<size_t>(i)]);
      }
      return key.is_string() ? get_attr(obj, key.s) : Value::undefined();
    default: return key.is_string() ? get_attr(obj, key.s) : Value::undefined();
  }
}

Value get_slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  const auto bound = [](const Value& v) -> std::optional<std::int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    return to_index(v, "slice");
  };
  const std::int64_t step = bound(step_v).value_or(1);
  if (step == 0) throw Failure("slice step cannot be zero");
  std::vector<Value> items;
  std::vector<std::string> chars;
  std::int64_t n = 0;
  if (obj.is_list()) {
    n = static_cast<std::int64_t>(obj.list->size());
  } else if (obj.is_string()) {
    chars = utf8_chars(obj.s);
    n = static_cast<std::int64_t>(chars.size());
  } else {
    throw Failure("'" + obj.type_name() + "' object is not subscriptable with a slice");
  }
  // CPython's PySlice_AdjustIndices.
  const auto adjust = [&](std::optional<std::int64_t> b, std::int64_t dflt) {
    if (!b) return dflt;
    std::int64_t x = *b;
    if (x < 0) {
      x += n;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= n) {
      x = step < 0 ? n - 1 : n;
    }
    return x;
  };
  const std::int64_t start = adjust(bound(start_v), step < 0 ? n - 1 : 0);
  const std::int64_t stop = adjust(bound(stop_v), step < 0 ? -1 : n);
  List out;
  std::string text;
  for (std::int64_t k = start; step > 0 ? k < stop : k > stop;) {
    if (obj.is_list()) out.push_back((*obj.list)[static_cast<size_t>(k)]);
    else text += chars[static_cast<size_t>(k)];
    if (__builtin_add_overflow(k, step, &k)) break;
  }
  return obj.is_list() ? Value::make_list(std::move(out), obj.is_tuple) : Value::string(text);
}

static const std::set<std::string> kFilters = {
    "length", "count", "trim", "tojson", "string", "int", "float", "lower", "upper", "title", "capitalize",
    "replace", "join", "first", "last", "default", "d", "list", "reverse", "sort", "items", "dictsort",
    "selectattr", "rejectattr", "select", "reject", "map", "unique", "safe", "abs", "bool", "min", "max", "sum"};

static const std::set<std::string> kTests = {
    "defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "iterable", "sequence",
    "boolean", "true", "false", "callable", "equalto", "eq", "==", "ne", "!=", "lt", "<", "le", "<=", "gt", ">",
    "ge", ">=", "odd", "even", "divisibleby", "in", "sameas", "lower", "upper"};

bool has_filter(const std::string& name) { return kFilters.count(name) > 0; }
bool has_test(const std::string& name) { return kTests.count(name) > 0; }

Value apply_filter(const std::string& name, const Value& value, Args& args) {
  const std::string what = "filter '" + name + "'";
  if (name == "length" || name == "count") {
    Params(args, what, {});
    switch (value.kind) {
      case Value::Kind::string: return Value::integer(static_cast<std::int64_t>(count_chars(value.s)));
      case Value::Kind::list: return Value::integer(static_cast<std::int64_t>(value.list->size()));
      case Value::Kind::dict:
      case Value::Kind::name_space: return Value::integer(static_cast<std::int64_t>(value.dict->items.size()));
      case Value::Kind::undefined: return Value::integer(0);
      default: throw Failure("object of type '" + value.type_name() + "' has no len()");
    }
  }
  if (name == "trim") {
    Params p(args, what, {"chars"});
    return Value::string(py_strip(value.str(), p.get(0), true, true));
  }
  if (name == "tojson") {
    Params p(args, what, {"ensure_ascii", "indent", "separators", "sort_keys"});
    JsonDumpOptions o;
    o.ensure_ascii = p.get_bool(0, false);
    const Value indent = p.get(1, Value::none());
    if (indent.is_string()) throw Failure("tojson: a string indent is not supported");
    o.indent = indent.is_none() ? -1 : static_cast<int>(std::clamp<std::int64_t>(to_index(indent, "indent"), 0, 1 << 16));
    const Value seps = p.get(2, Value::none());
    if (!seps.is_none()) {
      if (!seps.is_list() || seps.list->size() != 2) throw Failure("tojson: separators must be a pair of strings");
      o.has_separators = true;
      o.item_separator = need_string(seps.items()[0], "tojson separators");
      o.key_separator = need_string(seps.items()[1], "tojson separators");
    }
    o.sort_keys = p.get_bool(3, false);
    return Value::string(dump_json(value, o));
  }
  if (name == "string") {
    Params(args, what, {});
    return Value::string(value.str());
  }
  if (name == "int") {
    Params p(args, what, {"default", "base"});
    const Value fallback = p.get(0, Value::integer(0));
    if (p.get_int(1, 10) != 10) throw Failure("int filter: only base 10 is supported");
    switch (value.kind) {
      case Value::Kind::integer: return value;
      case Value::Kind::boolean: return Value::integer(value.b);
      case Value::Kind::floating:
        if (!std::isfinite(value.f)) return fallback;
        if (std::fabs(value.f) >= 9.2e18) throw Failure("integer overflow");
        return Value::integer(static_cast<std::int64_t>(value.f));
      case Value::Kind::string: {
        const std::string t = py_strip(value.s, Value::undefined(), true, true);
        if (t.find_first_of("xXpP") != std::string::npos) return fallback;  // C reads hex floats; Python does not
        try {
          size_t used = 0;
          const long long i = std::stoll(t, &used, 10);
          if (used == t.size()) return Value::integer(i);
          const double f = std::stod(t, &used);
          if (used == t.size() && std::isfinite(f) && std::fabs(f) < 9.2e18) return Value::integer(static_cast<std::int64_t>(f));
        } catch (const std::exception&) {
        }
        return fallback;
      }
      default: return fallback;
    }
  }
  if (name == "float") {
    Params p(args, what, {"default"});
    const Value fallback = p.get(0, Value::floating(0));
    if (value.is_number()) return Value::floating(value.as_double());
    if (value.is_string()) {
      const std::string t = py_strip(value.s, Value::undefined(), true, true);
      if (t.find_first_of("xXpP") != std::string::npos) return fallback;
      try {
        size_t used = 0;
        const double f = std::stod(t, &used);
        if (used == t.size()) return Value::floating(f);
      } catch (const std::exception&) {
      }
    }
    return fallback;
  }
  if (name == "bool") {
    Params(args, what, {});
    return Value::boolean(value.truthy());
  }
  if (name == "lower" || name == "upper" || name == "title" || name == "capitalize") {
    Params(args, what, {});
    const std::string s = value.str();
    if (name == "lower") return Value::string(map_case(s, to_lower));
    if (name == "upper") return Value::string(map_case(s, to_upper));
    if (name == "title") return Value::string(jinja_title(s));
    return Value::string(capitalize(s));
  }
  if (name == "replace") {
    Params p(args, what, {"old", "new", "count"});
    return Value::string(py_replace(value.str(), p.get(0).str(), p.get(1).str(), p.get_int(2, -1)));
  }
  if (name == "join") {
    Params p(args, what, {"d", "attribute"});
    const std::string sep = p.get_string(0, "");
    const std::string attr = p.get_string(1, "");
    std::string out;
    bool first = true;
    for (const Value& v : iterate(value)) {
      if (!first) out += sep;
      out += (attr.empty() ? v : attribute_path(v, attr)).str();
      first = false;
    }
    return Value::string(out);
  }
  if (name == "first" || name == "last") {
    Params(args, what, {});
    if (value.is_list() && value.list->empty()) return Value::undefined("no first item, sequence was empty");
    const List items = iterate(value);
    if (items.empty()) return Value::undefined("no " + name + " item, sequence was empty");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "default" || name == "d") {
    Params p(args, what, {"default_value", "boolean"});
    const bool boolean = p.get_bool(1, false);
    if (value.is_undefined() || (boolean && !value.truthy())) return p.get(0, Value::string(""));
    return value;
  }
  if (name == "list") {
    Params(args, what, {});
    return Value::make_list(iterate(value));
  }
  if (name == "reverse") {
    Params(args, what, {});
    if (value.is_string()) {
      auto chars = utf8_chars(value.s);
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
      return Value::string(out);
    }
    List items = iterate(value);
    std::reverse(items.begin(), items.end());
    return Value::make_list(std::move(items));
  }
  if (name == "sort") {
    Params p(args, what, {"reverse", "case_sensitive", "attribute"});
    const bool reverse = p.get_bool(0, false), case_sensitive = p.get_bool(1, false);
    const std::string attr = p.get_string(2, "");
    List items = iterate(value);
    const auto key = [&](const Value& v) { return lowered(attr.empty() ? v : attribute_path(v, attr), case_sensitive); };
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      return reverse ? compare(key(b), key(a)) < 0 : compare(key(a), key(b)) < 0;
    });
    return Value::make_list(std::move(items));
  }
  if (name == "items") {
    Params(args, what, {});
    if (value.is_undefined()) return Value::make_list({});
    if (!value.is_dict()) throw Failure("items filter needs a mapping, got " + value.type_name());
    Args none;
    return (*get_attr(value, "items").fn)(none);
  }
  if (name == "dictsort") {
    Params p(args, what, {"case_sensitive", "by", "reverse"});
    if (!value.is_dict()) throw Failure("dictsort needs a mapping, got " + value.type_name());
    const bool case_sensitive = p.get_bool(0, false), reverse = p.get_bool(2, false);
    const bool by_value = p.get_string(1, "key") == "value";
    List items;
    for (const auto& [k, v] : value.dict->items) items.push_back(Value::make_list({Value::string(k), v}, true));
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      const Value& x = a.items()[by_value ? 1 : 0];
      const Value& y = b.items()[by_value ? 1 : 0];
      const int c = compare(lowered(x, case_sensitive), lowered(y, case_sensitive));
      return reverse ? c > 0 : c < 0;
    });
    return Value::make_list(std::move(items));
  }
  if (name == "selectattr" || name == "rejectattr") return select_filter(value, args, true, name == "selectattr");
  if (name == "select" || name == "reject") return select_filter(value, args, false, name == "select");
  if (name == "map") {
    List out;
    const List items = iterate(value);
    if (args.positional.empty()) {
      Params p(args, what, {"attribute", "default"});
      const std::string attr = p.get_string(0, "");
      if (attr.empty()) throw Failure("map needs a filter name or attribute=");
      const Value fallback = p.get(1);
      for (const Value& v : items) out.push_back(attribute_path(v, attr, p.has(1) ? &fallback : nullptr));
    } else {
      const std::string filter = need_string(args.positional[0], "map");
      if (!has_filter(filter)) throw Failure("map: unsupported filter '" + filter + "'");
      for (const Value& v : items) {
        Args a = rest_args(args, 1);
        out.push_back(apply_filter(filter, v, a));
      }
    }
    return Value::make_list(std::move(out));
  }
  if (name == "unique") {
    Params p(args, what, {"case_sensitive", "attribute"});
    const bool case_sensitive = p.get_bool(0, false);
    const std::string attr = p.get_string(1, "");
    List out, seen;
    for (const Value& v : iterate(value)) {
      const Value key = lowered(attr.empty() ? v : attribute_path(v, attr), case_sensitive);
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, key); })) {
        seen.push_back(key);
        out.push_back(v);
      }
    }
    return Value::make_list(std::move(out));
  }
  if (name == "safe") {
    Params(args, what, {});
    return value;
  }
  if (name == "abs") {
    Params(args, what, {});
    if (value.kind == Value::Kind::integer) return Value::integer(value.i < 0 ? -value.i : value.i);
    if (value.kind == Value::Kind::boolean) return Value::integer(value.b);
    if (value.kind == Value::Kind::floating) return Value::floating(std::fabs(value.f));
    throw Failure("bad operand type for abs(): '" + value.type_name() + "'");
  }
  if (name == "min" || name == "max") {
    Params p(args, what, {"case_sensitive", "attribute"});
    const bool case_sensitive = p.get_bool(0, false);
    const std::string attr = p.get_string(1, "");
    const List items = iterate(value);
    if (items.empty()) return Value::undefined("no " + name + " item, sequence was empty");
    const Value* best = &items[0];
    for (const Value& v : items) {
      const int c = compare(lowered(attr.empty() ? v : attribute_path(v, attr), case_sensitive),
                            lowered(attr.empty() ? *best : attribute_path(*best, attr), case_sensitive));
      if (name == "min" ? c < 0 : c > 0) best = &v;
    }
    return *best;
  }
  if (name == "sum") {
    Params p(args, what, {"attribute", "start"});
    const std::string attr = p.get_string(0, "");
    Value total = p.get(1, Value::integer(0));
    for (const Value& v : iterate(value)) {
      const Value x = attr.empty() ? v : attribute_path(v, attr);
      if (!x.is_number() || !total.is_number()) throw Failure("sum: unsupported operand type '" + x.type_name() + "'");
      if (x.kind == Value::Kind::floating || total.kind == Value::Kind::floating) total = Value::floating(total.as_double() + x.as_double());
      else total = Value::integer(static_cast<std::int64_t>(total.as_double()) + static_cast<std::int64_t>(x.as_double()));
    }
    return total;
  }
  throw Failure("unsupported filter '" + name + "'");
}

bool apply_test(const std::string& name, const Value& value, Args& args) {
  const std::string what = "test '" + name + "'";
  using K = Value::Kind;
  const auto no_args = [&] { Params(args, what, {}); };
  if (name == "defined") return no_args(), !value.is_undefined();
  if (name == "undefined") return no_args(), value.is_undefined();
  if (name == "none") return no_args(), value.is_none();
  if (name == "string") return no_args(), value.is_string();
  if (name == "number") return no_args(), value.is_number();
  if (name == "integer") return no_args(), value.kind == K::integer;
  if (name == "float") return no_args(), value.kind == K::floating;
  if (name == "boolean") return no_args(), value.kind == K::boolean;
  if (name == "true") return no_args(), value.kind == K::boolean && value.b;
  if (name == "false") return no_args(), value.kind == K::boolean && !value.b;
  if (name == "mapping") return no_args(), value.is_dict();
  if (name == "iterable") return no_args(), value.is_string() || value.is_list() || value.is_dict() || value.is_undefined();
  if (name == "sequence") return no_args(), value.is_string() || value.is_list() || value.is_dict() || value.is_undefined();
  if (name == "callable") return no_args(), value.kind == K::function;
  if (name == "lower" || name == "upper") {
    no_args();
    if (!value.is_string()) return false;
    const std::string mapped = map_case(value.s, name == "lower" ? to_lower : to_upper);
    return mapped == value.s && map_case(value.s, name == "lower" ? to_upper : to_lower) != value.s;
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    const Params p(args, what, {"num"});
    const std::int64_t divisor = name == "divisibleby" ? p.get_int(0, 1) : 2;
    if (divisor == 0) throw Failure("integer division or modulo by zero");
    if (value.kind == K::floating) {
      const double r = std::fmod(value.f, static_cast<double>(divisor));
      return name == "odd" ? std::fabs(r) == 1 : r == 0;
    }
    if (value.kind != K::integer && value.kind != K::boolean) throw Failure(what + " needs a number, got " + value.type_name());
    const std::int64_t v = value.kind == K::boolean ? value.b : value.i;
    const std::int64_t r = ((v % divisor) + divisor) % divisor;
    return name == "odd" ? r == 1 : r == 0;
  }
  const Params p(args, what, {"other"});
  const Value other = p.get(0);
  if (name == "equalto" || name == "eq" || name == "==") return equal(value, other);
  if (name == "ne" || name == "!=") return !equal(value, other);
  if (name == "lt" || name == "<") return compare(value, other) < 0;
  if (name == "le" || name == "<=") return compare(value, other) <= 0;
  if (name == "gt" || name == ">") return compare(value, other) > 0;
  if (name == "ge" || name == ">=") return compare(value, other) >= 0;
  if (name == "in") return contains(other, value);
  if (name == "sameas") {
    // Python `is`: identity; for the singletons None, True and False it is equality of kind and value.
    if (value.kind != other.kind) return false;
    if (value.is_none() || value.kind == K::boolean) return equal(value, other);
    if (value.is_list()) return value.list == other.list;
    if (value.is_dict() || value.kind == K::name_space) return value.dict == other.dict;
    return false;
  }
  throw Failure("unsupported test '" + name + "'");
}

}  // namespace mm::jinja
