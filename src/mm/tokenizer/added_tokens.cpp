#include "mm/tokenizer/added_tokens.h"

#include <algorithm>

#include "mm/tokenizer/unicode_text.h"

namespace mm {
namespace {

bool is_continuation(char c) { return (static_cast<uint8_t>(c) & 0xC0) == 0x80; }

char32_t last_code_point(std::string_view text) {
  size_t start = text.size() - 1;
  while (start > 0 && is_continuation(text[start])) --start;
  return unicode::next_code_point(text, start);
}

char32_t first_code_point(std::string_view text) {
  size_t pos = 0;
  return unicode::next_code_point(text, pos);
}

// Start of the white-space run that ends at `end` (Rust's `\s*$` on text[..end]).
size_t white_space_run_start(std::string_view text, size_t end) {
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && is_continuation(text[start])) --start;
    size_t pos = start;
    if (!unicode::is_white_space(unicode::next_code_point(text, pos))) break;
    end = start;
  }
  return end;
}

// End of the white-space run that starts at `begin` (Rust's `^\s*` on text[begin..]).
size_t white_space_run_end(std::string_view text, size_t begin) {
  while (begin < text.size()) {
    size_t pos = begin;
    if (!unicode::is_white_space(unicode::next_code_point(text, pos))) break;
    begin = pos;
  }
  return begin;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<std::string>& patterns,
                                     const std::vector<const AddedToken*>& tokens)
    : nodes_(1), tokens_(tokens) {
  for (size_t t = 0; t < patterns.size(); ++t) {
    const std::string& pattern = patterns[t];
    if (pattern.empty()) continue;
    first_byte_[static_cast<uint8_t>(pattern[0])] = true;
    int32_t node = 0;
    for (char c : pattern) {
      const auto byte = static_cast<uint8_t>(c);
      int32_t child = -1;
      for (auto [b, n] : nodes_[node].children) {
        if (b == byte) child = n;
      }
      if (child < 0) {
        child = static_cast<int32_t>(nodes_.size());
        nodes_[node].children.emplace_back(byte, child);
        nodes_.emplace_back();
      }
      node = child;
    }
    // The first of two identical patterns wins, as in an Aho-Corasick automaton.
    if (nodes_[node].token < 0) nodes_[node].token = static_cast<int32_t>(t);
  }
}

std::pair<size_t, int32_t> AddedTokenMatcher::longest_at(std::string_view text, size_t pos) const {
  std::pair<size_t, int32_t> best{0, -1};
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto byte = static_cast<uint8_t>(text[i]);
    int32_t child = -1;
    for (auto [b, n] : nodes_[node].children) {
      if (b == byte) child = n;
    }
    if (child < 0) break;
    node = child;
    if (nodes_[node].token >= 0) best = {i + 1 - pos, nodes_[node].token};
  }
  return best;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<TextSegment>& segments) const {
  size_t done = 0;  // end of the previous segment
  for (size_t pos = 0; pos < text.size() && !tokens_.empty();) {
    if (!first_byte_[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    const auto [length, index] = longest_at(text, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = *tokens_[index];
    size_t start = pos, stop = pos + length;
    pos = stop;  // matches never overlap, even when this one is discarded
    if (token.single_word) {
      const bool word_before = start > 0 && unicode::is_word_char(last_code_point(text.substr(0, start)));
      const bool word_after = stop < text.size() && unicode::is_word_char(first_code_point(text.substr(stop)));
      if (word_before || word_after) continue;
    }
    if (token.lstrip) start = std::max(white_space_run_start(text, start), done);
    if (token.rstrip) stop = white_space_run_end(text, stop);
    if (done < start) segments.push_back({done, start, -1});
    segments.push_back({start, stop, token.id});
    done = stop;
    pos = stop;
  }
  if (done < text.size()) segments.push_back({done, text.size(), -1});
}

}  // namespace mm
