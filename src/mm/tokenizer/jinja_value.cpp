#include "mm/tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace mm::jinja {

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(const std::string& key, Value value) {
  for (auto& [k, v] : items)
    if (k == key) {
      v = std::move(value);
      return;
    }
  items.emplace_back(key, std::move(value));
}

Value Value::undefined(std::string name) {
  Value v;
  v.s = std::move(name);
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::none;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind = Kind::boolean;
  v.b = b;
  return v;
}
Value Value::integer(std::int64_t i) {
  Value v;
  v.kind = Kind::integer;
  v.i = i;
  return v;
}
Value Value::floating(double f) {
  Value v;
  v.kind = Kind::floating;
  v.f = f;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind = Kind::string;
  v.s = std::move(s);
  return v;
}
Value Value::make_list(List items, bool tuple) {
  Value v;
  v.kind = Kind::list;
  v.list = std::make_shared<const List>(std::move(items));
  v.is_tuple = tuple;
  return v;
}
Value Value::make_dict(Dict d) {
  Value v;
  v.kind = Kind::dict;
  v.dict = std::make_shared<Dict>(std::move(d));
  return v;
}
Value Value::make_namespace(Dict d) {
  Value v = make_dict(std::move(d));
  v.kind = Kind::name_space;
  return v;
}
Value Value::function(std::string name, Function f) {
  Value v;
  v.kind = Kind::function;
  v.fn = std::make_shared<const Function>(std::move(f));
  v.fn_name = std::move(name);
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return integer(j.get<std::int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: return integer(static_cast<std::int64_t>(j.get<std::uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: return floating(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return make_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (const auto& [k, e] : j.items()) d.items.emplace_back(k, from_json(e));
      return make_dict(std::move(d));
    }
    default: throw Failure("binary JSON values are not supported in a template context");
  }
}

bool Value::truthy() const {
  switch (kind) {
    case Kind::undefined:
    case Kind::none: return false;
    case Kind::boolean: return b;
    case Kind::integer: return i != 0;
    case Kind::floating: return f != 0;
    case Kind::string: return !s.empty();
    case Kind::list: return !list->empty();
    case Kind::dict: return !dict->items.empty();
    case Kind::name_space:
    case Kind::function: return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind) {
    case Kind::undefined: return "Undefined";
    case Kind::none: return "NoneType";
    case Kind::boolean: return "bool";
    case Kind::integer: return "int";
    case Kind::floating: return "float";
    case Kind::string: return "str";
    case Kind::list: return is_tuple ? "tuple" : "list";
    case Kind::dict: return "dict";
    case Kind::name_space: return "Namespace";
    case Kind::function: return "function";
  }
  return "?";
}

double Value::as_double() const {
  if (kind == Kind::floating) return f;
  if (kind == Kind::integer) return static_cast<double>(i);
  if (kind == Kind::boolean) return b ? 1 : 0;
  throw Failure("expected a number, got " + type_name());
}

std::string python_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const auto e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e))
    if (c != '.') digits += c;
  const int exponent = std::stoi(sci.substr(e + 1));
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int decpt = exponent + 1, n = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) return sign + "0." + std::string(-decpt, '0') + digits;
    if (decpt >= n) return sign + digits + std::string(decpt - n, '0') + ".0";
    return sign + digits.substr(0, decpt) + "." + digits.substr(decpt);
  }
  std::string out = sign + digits.substr(0, 1);
  if (n > 1) out += "." + digits.substr(1);
  const int x = std::abs(exponent);
  out += exponent < 0 ? "e-" : "e+";
  if (x < 10) out += "0";
  return out + std::to_string(x);
}

static std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == quote || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + quote;
}

std::string Value::repr() const {
  switch (kind) {
    case Kind::string: return repr_string(s);
    case Kind::undefined: return "Undefined";
    case Kind::list: {
      std::string out = is_tuple ? "(" : "[";
      for (size_t k = 0; k < list->size(); ++k) out += (k ? ", " : "") + (*list)[k].repr();
      if (is_tuple && list->size() == 1) out += ",";
      return out + (is_tuple ? ")" : "]");
    }
    case Kind::dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : dict->items) {
        out += (first ? "" : ", ") + repr_string(k) + ": " + v.repr();
        first = false;
      }
      return out + "}";
    }
    case Kind::name_space: return "<Namespace " + make_dict(*dict).repr() + ">";
    default: return str();
  }
}

std::string Value::str() const {
  switch (kind) {
    case Kind::undefined: return "";
    case Kind::none: return "None";
    case Kind::boolean: return b ? "True" : "False";
    case Kind::integer: return std::to_string(i);
    case Kind::floating: return python_float_repr(f);
    case Kind::string: return s;
    case Kind::function: return "<function " + fn_name + ">";
    default: return repr();
  }
}

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind != Value::Kind::floating && b.kind != Value::Kind::floating)
      return (a.kind == Value::Kind::boolean ? a.b : a.i) == (b.kind == Value::Kind::boolean ? b.b : b.i);
    return a.as_double() == b.as_double();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::undefined:
    case Value::Kind::none: return true;
    case Value::Kind::string: return a.s == b.s;
    case Value::Kind::list: {
      if (a.is_tuple != b.is_tuple || a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    }
    case Value::Kind::dict: {
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, v] : a.dict->items) {
        const Value* other = b.dict->find(k);
        if (!other || !equal(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::name_space: return a.dict == b.dict;
    case Value::Kind::function: return a.fn == b.fn;
    default: return false;
  }
}

int compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind != Value::Kind::floating && b.kind != Value::Kind::floating) {
      const std::int64_t x = a.kind == Value::Kind::boolean ? a.b : a.i, y = b.kind == Value::Kind::boolean ? b.b : b.i;
      return x < y ? -1 : x > y ? 1 : 0;
    }
    const double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) return a.s < b.s ? -1 : a.s > b.s ? 1 : 0;  // UTF-8 orders as code points
  if (a.is_list() && b.is_list() && a.is_tuple == b.is_tuple) {
    const size_t n = std::min(a.list->size(), b.list->size());
    for (size_t k = 0; k < n; ++k)
      if (!equal((*a.list)[k], (*b.list)[k])) return compare((*a.list)[k], (*b.list)[k]);
    return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size() ? 1 : 0;
  }
  throw Failure("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Value::Kind::string:
      if (!item.is_string())
        throw Failure("'in <string>' requires string as left operand, not " + item.type_name());
      return container.s.find(item.s) != std::string::npos;
    case Value::Kind::list:
      return std::any_of(container.list->begin(), container.list->end(),
                         [&](const Value& v) { return equal(v, item); });
    case Value::Kind::dict: return item.is_string() && container.dict->find(item.s) != nullptr;
    case Value::Kind::undefined: return false;
    default: throw Failure("argument of type '" + container.type_name() + "' is not iterable");
  }
}

static void dump_json_string(const std::string& s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (size_t k = 0; k < s.size(); ++k) {
    const unsigned char c = s[k];
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    char hex[16];
    if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
      std::snprintf(hex, sizeof hex, "\\u%04x", c);
      out += hex;
    } else if (c < 0x80 || !ensure_ascii) {
      out += static_cast<char>(c);
    } else {
      // Decode one UTF-8 sequence and write it as \uXXXX (a surrogate pair above the BMP).
      int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      std::uint32_t cp = len == 4 ? c & 0x07 : len == 3 ? c & 0x0F : len == 2 ? c & 0x1F : c;
      for (int m = 1; m < len && k + 1 < s.size(); ++m) cp = (cp << 6) | (s[++k] & 0x3F);
      if (cp >= 0x10000) {
        cp -= 0x10000;
        std::snprintf(hex, sizeof hex, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
      } else {
        std::snprintf(hex, sizeof hex, "\\u%04x", cp);
      }
      out += hex;
    }
  }
  out += '"';
}

static void dump_json_into(const Value& v, const JsonDumpOptions& o, int depth, std::string& out) {
  if (depth > 512) throw Failure("tojson: value nested too deeply");
  const std::string item_sep = o.has_separators ? o.item_separator : (o.indent >= 0 ? "," : ", ");
  const std::string key_sep = o.has_separators ? o.key_separator : ": ";
  const auto newline = [&](int level) {
    if (o.indent >= 0) out += "\n" + std::string(static_cast<size_t>(o.indent) * level, ' ');
  };
  switch (v.kind) {
    case Value::Kind::none: out += "null"; return;
    case Value::Kind::boolean: out += v.b ? "true" : "false"; return;
    case Value::Kind::integer: out += std::to_string(v.i); return;
    case Value::Kind::floating:
      out += std::isnan(v.f) ? "NaN" : std::isinf(v.f) ? (v.f > 0 ? "Infinity" : "-Infinity") : python_float_repr(v.f);
      return;
    case Value::Kind::string: dump_json_string(v.s, o.ensure_ascii, out); return;
    case Value::Kind::list: {
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += item_sep;
        newline(depth + 1);
        dump_json_into((*v.list)[k], o, depth + 1, out);
      }
      newline(depth);
      out += "]";
      return;
    }
    case Value::Kind::dict: {
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : v.dict->items) entries.push_back(&e);
      if (o.sort_keys)
        std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += "{";
      for (size_t k = 0; k < entries.size(); ++k) {
        if (k) out += item_sep;
        newline(depth + 1);
        dump_json_string(entries[k]->first, o.ensure_ascii, out);
        out += key_sep;
        dump_json_into(entries[k]->second, o, depth + 1, out);
      }
      newline(depth);
      out += "}";
      return;
    }
    default: throw Failure("Object of type " + v.type_name() + " is not JSON serializable");
  }
}

std::string dump_json(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  dump_json_into(value, options, 0, out);
  return out;
}

std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t k = 0; k < s.size();) {
    const unsigned char c = s[k];
    size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    len = std::min(len, s.size() - k);
    out.push_back(s.substr(k, len));
    k += len;
  }
  return out;
}

std::size_t count_chars(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

}  // namespace mm::jinja
