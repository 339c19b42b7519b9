#include "mm/tokenizer/jinja_str.h"

#include <utf8proc.h>

#include <algorithm>

#include "mm/tokenizer/unicode_text.h"

namespace mm::jinja {
namespace {

const std::string& string_arg(const Value& v, const char* what) {
  if (!v.is_string()) throw Failure(std::string(what) + " needs a string, got " + v.type_name());
  return v.s;
}

}  // namespace

std::u32string decode(const std::string& s) {
  std::u32string out;
  for (size_t pos = 0; pos < s.size();) out += unicode::next_code_point(s, pos);
  return out;
}
std::string encode(const std::u32string& s) {
  std::string out;
  for (char32_t c : s) unicode::append_utf8(c, out);
  return out;
}
bool py_space(char32_t c) { return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || (c > 0x7F && unicode::is_white_space(c)); }
char32_t to_lower(char32_t c) { return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))); }
char32_t to_upper(char32_t c) { return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))); }
bool is_cased_letter(char32_t c) { return to_lower(c) != c || to_upper(c) != c; }

std::string map_case(const std::string& s, char32_t (*f)(char32_t)) {
  std::u32string u = decode(s);
  for (auto& c : u) c = f(c);
  return encode(u);
}

std::string capitalize(const std::string& s) {
  std::u32string u = decode(s);
  for (size_t k = 0; k < u.size(); ++k) u[k] = k == 0 ? to_upper(u[k]) : to_lower(u[k]);
  return encode(u);
}

// Python's str.title(): a cased character after an uncased one starts a word.
std::string py_title(const std::string& s) {
  std::u32string u = decode(s);
  bool prev_cased = false;
  for (auto& c : u) {
    const bool cased = is_cased_letter(c);
    c = prev_cased ? to_lower(c) : to_upper(c);
    prev_cased = cased;
  }
  return encode(u);
}

// jinja2's title filter: words start after runs of '-', whitespace, '(', '{', '[' or '<'.
std::string jinja_title(const std::string& s) {
  std::u32string u = decode(s);
  bool word_start = true;
  for (auto& c : u) {
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_space(c);
    if (sep) {
      word_start = true;
    } else {
      c = word_start ? to_upper(c) : to_lower(c);
      word_start = false;
    }
  }
  return encode(u);
}

std::string py_strip(const std::string& s, const Value& chars, bool left, bool right) {
  const std::u32string u = decode(s);
  std::u32string set;
  const bool whitespace = chars.is_undefined() || chars.is_none();
  if (!whitespace) set = decode(string_arg(chars, "strip"));
  const auto strip_it = [&](char32_t c) { return whitespace ? py_space(c) : set.find(c) != std::u32string::npos; };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return encode(u.substr(b, e - b));
}

Value py_split(const std::string& s, const Value& sep, std::int64_t maxsplit, bool from_right) {
  List parts;
  if (sep.is_undefined() || sep.is_none()) {
    std::u32string u = decode(s);
    std::vector<std::u32string> words;
    if (!from_right) {
      size_t k = 0;
      while (true) {
        while (k < u.size() && py_space(u[k])) ++k;
        if (k >= u.size()) break;
        if (maxsplit >= 0 && static_cast<std::int64_t>(words.size()) == maxsplit) {
          size_t e = u.size();
          while (e > k && py_space(u[e - 1])) --e;
          words.push_back(u.substr(k, e - k));
          break;
        }
        size_t e = k;
        while (e < u.size() && !py_space(u[e])) ++e;
        words.push_back(u.substr(k, e - k));
        k = e;
      }
    } else {
      size_t k = u.size();
      while (true) {
        while (k > 0 && py_space(u[k - 1])) --k;
        if (k == 0) break;
        if (maxsplit >= 0 && static_cast<std::int64_t>(words.size()) == maxsplit) {
          size_t b = 0;
          while (b < k && py_space(u[b])) ++b;
          words.push_back(u.substr(b, k - b));
          break;
        }
        size_t b = k;
        while (b > 0 && !py_space(u[b - 1])) --b;
        words.push_back(u.substr(b, k - b));
        k = b;
      }
      std::reverse(words.begin(), words.end());
    }
    for (const auto& w : words) parts.push_back(Value::string(encode(w)));
    return Value::make_list(std::move(parts));
  }
  const std::string& delim = string_arg(sep, "split");
  if (delim.empty()) throw Failure("split: empty separator");
  std::vector<std::string> pieces;
  if (!from_right) {
    size_t start = 0;
    while (true) {
      const size_t at = (maxsplit >= 0 && static_cast<std::int64_t>(pieces.size()) == maxsplit) ? std::string::npos : s.find(delim, start);
      if (at == std::string::npos) {
        pieces.push_back(s.substr(start));
        break;
      }
      pieces.push_back(s.substr(start, at - start));
      start = at + delim.size();
    }
  } else {
    size_t end = s.size();
    while (true) {
      size_t at = std::string::npos;
      if (!(maxsplit >= 0 && static_cast<std::int64_t>(pieces.size()) == maxsplit) && end >= delim.size())
        at = s.rfind(delim, end - delim.size());
      if (at == std::string::npos) {
        pieces.push_back(s.substr(0, end));
        break;
      }
      pieces.push_back(s.substr(at + delim.size(), end - at - delim.size()));
      end = at;
    }
    std::reverse(pieces.begin(), pieces.end());
  }
  for (auto& p : pieces) parts.push_back(Value::string(std::move(p)));
  return Value::make_list(std::move(parts));
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, std::int64_t count) {
  std::string out;
  std::int64_t done = 0;
  if (old.empty()) {
    // Python inserts the replacement before every code point and at the end.
    const auto chars = utf8_chars(s);
    for (const auto& c : chars) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      out += c;
    }
    if (count < 0 || done < count) out += repl;
    return out;
  }
  size_t start = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(old, start);
    if (at == std::string::npos) break;
    out += s.substr(start, at - start) + repl;
    start = at + old.size();
    ++done;
  }
  return out + s.substr(start);
}

}  // namespace mm::jinja
