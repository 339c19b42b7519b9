#include "mm/tokenizer/prompt_clean.h"

#include "mm/tokenizer/html_unescape.h"
#include "mm/tokenizer/unicode_text.h"

namespace mm {
namespace {

// str.strip(): drops str.isspace() characters at both ends.
std::string_view python_strip(std::string_view text) {
  size_t begin = 0;
  while (begin < text.size()) {
    size_t next = begin;
    if (!is_python_space(unicode::next_code_point(text, next))) break;
    begin = next;
  }
  size_t end = text.size();
  while (end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
    size_t pos = start;
    if (!is_python_space(unicode::next_code_point(text, pos))) break;
    end = start;
  }
  return text.substr(begin, end - begin);
}

}  // namespace

bool is_python_space(char32_t cp) {
  return (cp >= 0x1C && cp <= 0x1F) || unicode::is_white_space(cp);
}

std::string wan_prompt_clean(std::string_view input) {
  const std::string repaired = unicode::is_valid_utf8(input) ? std::string(input) : unicode::repair_utf8(input);
  const std::string unescaped = html_unescape(html_unescape(repaired));
  const std::string_view text = python_strip(unescaped);
  std::string collapsed;
  collapsed.reserve(text.size());
  bool in_run = false;
  for (size_t pos = 0; pos < text.size();) {
    const size_t start = pos;
    if (unicode::is_white_space(unicode::next_code_point(text, pos))) {
      if (!in_run) collapsed.push_back(' ');
      in_run = true;
      continue;
    }
    in_run = false;
    collapsed.append(text, start, pos - start);
  }
  return std::string(python_strip(collapsed));
}

}  // namespace mm
