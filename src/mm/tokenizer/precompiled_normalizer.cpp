#include "mm/tokenizer/precompiled_normalizer.h"

#include <utf8proc.h>

#include <cstring>

#include "mm/core/error.h"
#include "mm/tokenizer/unicode_text.h"

namespace mm {
namespace {

// darts-clone's double-array unit layout (the format sentencepiece compiles charsmaps into).
bool has_leaf(uint32_t unit) { return (unit >> 8) & 1; }
uint32_t value(uint32_t unit) { return unit & 0x7FFFFFFFu; }
uint32_t label(uint32_t unit) { return unit & (0x80000000u | 0xFFu); }
uint32_t offset(uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }

}  // namespace

PrecompiledNormalizer::PrecompiledNormalizer(std::string_view charsmap, const std::string& file) {
  if (charsmap.empty()) return;
  MM_CHECK(charsmap.size() >= 4, file, ": precompiled_charsmap is truncated");
  uint32_t trie_bytes = 0;
  for (int i = 3; i >= 0; --i) trie_bytes = trie_bytes << 8 | static_cast<uint8_t>(charsmap[i]);
  MM_CHECK(trie_bytes % 4 == 0 && trie_bytes > 0 && trie_bytes <= charsmap.size() - 4, file,
           ": precompiled_charsmap has a bad trie size ", trie_bytes);
  trie_.resize(trie_bytes / 4);
  for (size_t i = 0; i < trie_.size(); ++i) {
    uint32_t unit = 0;
    for (int b = 3; b >= 0; --b) unit = unit << 8 | static_cast<uint8_t>(charsmap[4 + i * 4 + b]);
    trie_[i] = unit;
  }
  replacements_ = std::string(charsmap.substr(4 + trie_bytes));
  replacements_.push_back('\0');  // every lookup ends at a NUL, even in a corrupt map
}

const char* PrecompiledNormalizer::transform(std::string_view chunk) const {
  if (trie_.empty()) return nullptr;
  size_t node = offset(trie_[0]);
  for (const char c : chunk) {
    const auto byte = static_cast<uint8_t>(c);
    node ^= byte;
    if (node >= trie_.size() || label(trie_[node]) != byte) return nullptr;
    const uint32_t unit = trie_[node];
    node ^= offset(unit);
    if (node >= trie_.size()) return nullptr;
    if (has_leaf(unit)) {
      const uint32_t at = value(trie_[node]);
      return at < replacements_.size() ? replacements_.data() + at : nullptr;
    }
  }
  return nullptr;
}

std::string PrecompiledNormalizer::normalize(std::string_view text) const {
  if (trie_.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  utf8proc_int32_t state = 0;
  while (pos < text.size()) {
    // One extended grapheme cluster: [start, pos).
    const size_t start = pos;
    char32_t cp = unicode::next_code_point(text, pos);
    while (pos < text.size()) {
      size_t next = pos;
      const char32_t following = unicode::next_code_point(text, next);
      if (utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(cp), static_cast<utf8proc_int32_t>(following),
                                           &state)) {
        break;
      }
      cp = following;
      pos = next;
    }
    const std::string_view grapheme = text.substr(start, pos - start);
    if (grapheme.size() < 6) {
      if (const char* norm = transform(grapheme)) {
        out += norm;
        continue;
      }
    }
    for (size_t i = 0; i < grapheme.size();) {
      const size_t char_start = i;
      unicode::next_code_point(grapheme, i);
      const std::string_view part = grapheme.substr(char_start, i - char_start);
      const char* norm = transform(part);
      out += norm ? std::string_view(norm) : part;
    }
  }
  return out;
}

}  // namespace mm
