// The SentencePiece "precompiled" normalizer (nmt_nfkc and friends: a double-array trie of
// UTF-8 keys with their replacements, NormalizerSpec.precompiled_charsmap) applied the way
// Hugging Face `tokenizers` applies it (normalizers.Precompiled), not the way sentencepiece does:
// the text is walked by extended grapheme cluster; a cluster shorter than 6 bytes whose leading
// bytes form a key (the shortest such key) is replaced as a whole by that key's replacement —
// the rest of the cluster is dropped ("ﬁ" + U+0301 gives "fi") —, otherwise each code point is
// replaced on its own, so no composition across code points ("ｶﾞ" stays two characters where
// sentencepiece gives "ガ"). Grapheme clusters come from utf8proc, whose Unicode version may
// differ from the `unicode-segmentation` crate's on recently added characters.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mm {

class PrecompiledNormalizer {
 public:
  PrecompiledNormalizer() = default;  // no charsmap: the identity
  // `charsmap` as stored in the proto: uint32 trie size (little-endian), the trie units, then
  // the NUL-terminated replacements. `file` names the model in errors.
  PrecompiledNormalizer(std::string_view charsmap, const std::string& file);

  // text must be valid UTF-8.
  std::string normalize(std::string_view text) const;

 private:
  // The replacement of the shortest key that is a prefix of `chunk`, or nullptr.
  const char* transform(std::string_view chunk) const;

  std::vector<uint32_t> trie_;
  std::string replacements_;
};

}  // namespace mm
