// What a template can do to a value besides operators: jinja2's filters and tests, attribute and
// item access, the Python str and dict methods chat templates call, and iteration. All of it
// follows jinja2 under ImmutableSandboxedEnvironment (the environment transformers uses), so
// methods that mutate (list.append, dict.update) are refused there and here. Failures are
// jinja::Failure; the interpreter adds the template's name and position.
#pragma once
#include <string>

#include "mm/tokenizer/jinja_value.h"

namespace mm::jinja {

bool has_filter(const std::string& name);
bool has_test(const std::string& name);
Value apply_filter(const std::string& name, const Value& value, Args& args);
bool apply_test(const std::string& name, const Value& value, Args& args);

// `obj.name`: a method of a str or dict, else the key `name`; undefined when missing.
Value get_attr(const Value& obj, const std::string& name);
// `obj[key]`: an item (negative list indices count from the end), else an attribute.
Value get_item(const Value& obj, const Value& key);
// `obj[start:stop:step]` on a list or str, each bound possibly none.
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// The items a for loop visits: list items, dict keys, the characters of a str; nothing for
// undefined.
List iterate(const Value& value);

}  // namespace mm::jinja
