// Added tokens (special tokens like <|im_end|> and user-added ones) are found in the text before
// pre-tokenization and never split, with the matching rules of `tokenizers`' AddedVocabulary:
// leftmost-longest, non-overlapping matches; `single_word` only between non-word characters;
// `lstrip` / `rstrip` swallow the white space beside the token.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mm {

struct AddedToken {
  std::string content;
  int64_t id = -1;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;  // matched in the normalized text (else in the raw text)
  bool special = false;     // skipped by decode(..., skip_special_tokens=true)
};

// A piece of the text: an added token (id >= 0) or text to tokenize further (id == -1).
struct TextSegment {
  size_t begin = 0;
  size_t end = 0;
  int64_t id = -1;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `patterns[i]` is the text to look for (the content, normalized for normalized tokens) of
  // `tokens[i]`; the tokens must outlive the matcher.
  AddedTokenMatcher(const std::vector<std::string>& patterns, const std::vector<const AddedToken*>& tokens);

  // Splits `text` into segments that cover it entirely, in order.
  void split(std::string_view text, std::vector<TextSegment>& segments) const;
  bool empty() const { return tokens_.empty(); }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;
    int32_t token = -1;  // index into tokens_ when a pattern ends here
  };
  // Longest pattern starting at text[pos]: {length, token index} or {0, -1}.
  std::pair<size_t, int32_t> longest_at(std::string_view text, size_t pos) const;

  std::vector<Node> nodes_;
  std::vector<const AddedToken*> tokens_;
  bool first_byte_[256] = {};
};

}  // namespace mm
