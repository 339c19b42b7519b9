// Python's str operations on our UTF-8 strings, as the templates' methods and filters need them:
// Python works on code points with Unicode whitespace and case, so these decode to code points
// rather than treat bytes as characters.
#pragma once
#include <cstdint>
#include <string>

#include "mm/tokenizer/jinja_value.h"

namespace mm::jinja {

std::u32string decode(const std::string& s);
std::string encode(const std::u32string& s);

bool py_space(char32_t c);  // str.isspace() of one code point
char32_t to_lower(char32_t c);
char32_t to_upper(char32_t c);
bool is_cased_letter(char32_t c);
std::string map_case(const std::string& s, char32_t (*f)(char32_t));

std::string capitalize(const std::string& s);   // str.capitalize()
std::string py_title(const std::string& s);     // str.title()
std::string jinja_title(const std::string& s);  // jinja2's title filter, which splits words differently

// str.strip / lstrip / rstrip; `chars` none or undefined strips whitespace.
std::string py_strip(const std::string& s, const Value& chars, bool left, bool right);
// str.split / rsplit; `sep` none or undefined splits on runs of whitespace. Returns a list.
Value py_split(const std::string& s, const Value& sep, std::int64_t maxsplit, bool from_right);
// str.replace; count < 0 replaces all.
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, std::int64_t count);

}  // namespace mm::jinja
