// The values a Jinja template computes with, with Python's semantics as jinja2 has them: the
// chat templates were written against CPython, so truthiness, equality, `str()` and `repr()`,
// integer vs float arithmetic and JSON dumping must match it byte for byte.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace mm::jinja {

// A failure inside the engine that does not know where in the template it happened; the
// interpreter turns it into an mm::Error naming the template, line and column.
class Failure : public std::runtime_error {
 public:
  explicit Failure(const std::string& message) : std::runtime_error(message) {}
};

struct Value;
using List = std::vector<Value>;

// An insertion-ordered dict with string keys: Python dicts keep insertion order, and tojson of a
// tool schema must print the keys in the order they were given.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value value);
};

struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;
};
using Function = std::function<Value(Args&)>;

struct Value {
  // Undefined is jinja2's Undefined (a missing variable, key or attribute): prints as '', is
  // falsy and iterates as empty, but any attribute of it is an error. None is Python's None.
  // Namespace is namespace(): a dict whose attributes `set` may assign, shared by reference.
  enum class Kind { undefined, none, boolean, integer, floating, string, list, dict, name_space, function };
  Kind kind = Kind::undefined;
  bool b = false;
  std::int64_t i = 0;
  double f = 0;
  std::string s;                   // string; for undefined, the name that was missing
  std::shared_ptr<const List> list;
  bool is_tuple = false;           // a list that prints as a tuple: ('a', 1)
  std::shared_ptr<Dict> dict;      // dict and namespace (lists and dicts are never mutated in place)
  std::shared_ptr<const Function> fn;
  std::string fn_name;

  static Value undefined(std::string name = "");
  static Value none();
  static Value boolean(bool v);
  static Value integer(std::int64_t v);
  static Value floating(double v);
  static Value string(std::string v);
  static Value make_list(List items, bool tuple = false);
  static Value make_dict(Dict d);
  static Value make_namespace(Dict d);
  static Value function(std::string name, Function f);
  static Value from_json(const nlohmann::ordered_json& j);

  bool is_undefined() const { return kind == Kind::undefined; }
  bool is_none() const { return kind == Kind::none; }
  bool is_string() const { return kind == Kind::string; }
  bool is_list() const { return kind == Kind::list; }
  bool is_dict() const { return kind == Kind::dict; }
  bool is_number() const { return kind == Kind::integer || kind == Kind::floating || kind == Kind::boolean; }
  const List& items() const { return *list; }

  bool truthy() const;
  std::string type_name() const;  // Python's, for messages: 'str', 'list', 'NoneType', ...
  std::string str() const;        // Python str()
  std::string repr() const;       // Python repr()
  double as_double() const;       // numbers only
};

bool equal(const Value& a, const Value& b);    // Python ==
int compare(const Value& a, const Value& b);   // Python <, for numbers, strings and lists; else Failure
bool contains(const Value& container, const Value& item);  // Python `item in container`

// json.dumps(value, ensure_ascii, indent, separators, sort_keys) as transformers' tojson filter
// calls it; indent < 0 means None.
struct JsonDumpOptions {
  bool ensure_ascii = false;
  int indent = -1;
  std::string item_separator;  // empty: Python's default for the indent
  std::string key_separator;
  bool has_separators = false;
  bool sort_keys = false;
};
std::string dump_json(const Value& value, const JsonDumpOptions& options);

// Python's repr() of a float: the shortest round-trip digits, '1.0', '1e-05', 'inf'.
std::string python_float_repr(double v);

// Python indexes, slices and measures strings by code point; ours are UTF-8.
std::vector<std::string> utf8_chars(const std::string& s);
std::size_t count_chars(const std::string& s);

}  // namespace mm::jinja
