#include "mm/tokenizer/html_unescape.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "mm/tokenizer/unicode_text.h"

namespace mm {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex_digit(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
int hex_value(char c) { return is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10; }

// Python's html._invalid_charrefs: the Windows-1252 reading of C1 controls, plus NUL and CR.
char32_t invalid_charref(uint32_t n) {
  static constexpr char32_t kC1[32] = {0x20AC, 0x81,   0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021,
                                       0x02C6, 0x2030, 0x0160, 0x2039, 0x0152, 0x8D,   0x017D, 0x8F,
                                       0x90,   0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014,
                                       0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x9D,   0x017E, 0x0178};
  if (n == 0x00) return 0xFFFD;
  if (n == 0x0D) return 0x0D;
  if (n >= 0x80 && n <= 0x9F) return kC1[n - 0x80];
  return 0;
}

// Python's html._invalid_codepoints: references to these give nothing.
bool is_invalid_codepoint(uint32_t n) {
  return (n >= 0x01 && n <= 0x08) || n == 0x0B || (n >= 0x0E && n <= 0x1F) || (n >= 0x7F && n <= 0x9F) ||
         (n >= 0xFDD0 && n <= 0xFDEF) || (n & 0xFFFE) == 0xFFFE;
}

void append_numeric(uint32_t n, std::string& out) {
  if (const char32_t replacement = invalid_charref(n)) {
    unicode::append_utf8(replacement, out);
  } else if ((n >= 0xD800 && n <= 0xDFFF) || n > 0x10FFFF) {
    unicode::append_utf8(0xFFFD, out);
  } else if (!is_invalid_codepoint(n)) {
    unicode::append_utf8(n, out);
  }
}

// Digits parsed with saturation: every value past 0x10FFFF reads as "too large".
uint32_t parse_number(std::string_view digits, int base) {
  uint32_t n = 0;
  for (const char c : digits) n = std::min<uint32_t>(n * base + hex_value(c), 0x110000);
  return n;
}

// `&#...` at text[pos] (pos at '&'): appends the replacement and returns the end, or 0.
size_t numeric_reference(std::string_view text, size_t pos, std::string& out) {
  size_t i = pos + 2;
  const bool hex = i < text.size() && (text[i] == 'x' || text[i] == 'X');
  if (hex) ++i;
  const size_t start = i;
  while (i < text.size() && (hex ? is_hex_digit(text[i]) : is_digit(text[i]))) ++i;
  if (i == start) return 0;
  append_numeric(parse_number(text.substr(start, i - start), hex ? 16 : 10), out);
  return i < text.size() && text[i] == ';' ? i + 1 : i;
}

bool ends_name(char32_t cp) {
  return cp == '\t' || cp == '\n' || cp == '\f' || cp == ' ' || cp == '<' || cp == '&' || cp == '#' || cp == ';';
}

// `&name` at text[pos]: Python's `[^\t\n\f <&#;]{1,32};?` and its lookup. Returns the end, or 0.
size_t named_reference(std::string_view text, size_t pos, std::string& out) {
  std::vector<size_t> bounds{pos + 1};  // code point boundaries of the name
  size_t i = pos + 1;
  while (i < text.size() && bounds.size() <= 32) {
    size_t next = i;
    if (ends_name(unicode::next_code_point(text, next))) break;
    bounds.push_back(i = next);
  }
  if (bounds.size() == 1) return 0;
  if (i < text.size() && text[i] == ';') bounds.push_back(++i);
  const std::string_view name = text.substr(pos + 1, i - pos - 1);
  if (const char* replacement = html5_entity(name)) {
    out += replacement;
    return i;
  }
  // The longest prefix of at least two code points that is a name.
  for (size_t x = bounds.size() - 2; x >= 2; --x) {
    if (const char* replacement = html5_entity(text.substr(pos + 1, bounds[x] - pos - 1))) {
      out += replacement;
      out += text.substr(bounds[x], i - bounds[x]);
      return i;
    }
  }
  out += text.substr(pos, i - pos);
  return i;
}

}  // namespace

std::string html_unescape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t amp = text.find('&', pos);
    if (amp == std::string_view::npos) break;
    out += text.substr(pos, amp - pos);
    size_t end = 0;
    if (amp + 1 < text.size()) {
      end = text[amp + 1] == '#' ? numeric_reference(text, amp, out) : named_reference(text, amp, out);
    }
    if (end == 0) {
      out.push_back('&');
      end = amp + 1;
    }
    pos = end;
  }
  out += text.substr(pos);
  return out;
}

}  // namespace mm
