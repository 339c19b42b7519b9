// mm::SentencePieceTokenizer: the T5/umT5 tokenizer (Wan's text encoder), giving the ids that
// transformers' AutoTokenizer gives on the same tokenizer directory (T5Tokenizer of transformers
// 5.x, a `tokenizers` Unigram model built from spiece.model). spiece.model is read directly
// (sentencepiece_model.h) and every step follows `tokenizers`, which differs from sentencepiece
// itself (on the oracle's cases transformers and the sentencepiece library disagree on 469 of 521):
//   1. special added tokens (</s>, <pad>, <unk>, <extra_id_N>) are cut out of the raw text first
//      and never split; "a</s>b" gives ▁a </s> ▁b </s>;
//   2. each remaining piece of text is normalized with the model's precompiled charsmap the way
//      `tokenizers` does it (see precompiled_normalizer.h), split on Unicode white space, and
//      every word gets a leading ▁ (and is split before any ▁ it contains);
//   3. each word is segmented by the Unigram model with byte fallback off: a character outside
//      the vocabulary gives <unk> (consecutive ones a single <unk>), never byte pieces, even when
//      spiece.model was trained with byte_fallback like umT5's; byte pieces are ordinary
//      vocabulary entries (the text "<0x41>" gives the piece <0x41>);
//   4. </s> is appended (add_special_tokens).
// Residual difference: grapheme clusters come from utf8proc rather than Rust's
// `unicode-segmentation`; they may disagree on characters newer than one of the two.
//
// Text that is not valid UTF-8 is repaired first, like bytes.decode("utf-8", errors="replace").
// Thread-safe: immutable after loading; copies share their state.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mm {

class SentencePieceTokenizer {
 public:
  // A tokenizer directory (diffusers' `tokenizer/`): spiece.model, and when present
  // tokenizer.json (its added_tokens: ids and contents of the special tokens); without
  // spiece.model, the Unigram model, scores, unk_id and charsmap of tokenizer.json itself,
  // tokenizer_config.json and special_tokens_map.json (eos/pad/unk tokens, extra_ids).
  // Without tokenizer.json the added tokens are T5Tokenizer's: <pad>, </s>, <unk> and
  // extra_ids (default 100) sentinels <extra_id_0> ... appended after the vocabulary in reverse.
  static SentencePieceTokenizer from_dir(const std::filesystem::path& dir);
  // A spiece.model alone: T5's special tokens and 100 sentinels, as from_dir without JSON files.
  static SentencePieceTokenizer from_file(const std::filesystem::path& spiece_model);

  // add_special_tokens appends </s>, as transformers does by default.
  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens = true) const;

  // transformers' tokenizer(texts, padding="max_length", max_length=max_length, truncation=True,
  // add_special_tokens=...): each row is cut to max_length tokens keeping </s> last (the text's
  // tokens are truncated, not the appended </s>), then padded on the right with <pad>.
  struct PaddedBatch {
    int64_t batch = 0;
    int64_t length = 0;                  // max_length
    std::vector<int64_t> input_ids;      // [batch, length], row-major
    std::vector<int64_t> attention_mask; // [batch, length]: 1 for tokens, 0 for padding
  };
  PaddedBatch encode_batch(const std::vector<std::string>& texts, int64_t max_length,
                           bool add_special_tokens = true) const;

  // Pieces joined with ▁ read as a space and the first token's ▁ dropped (Metaspace decoder).
  // Ids outside the vocabulary are skipped; skip_special_tokens drops </s>, <pad>, <unk> and
  // the sentinels.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const;

  std::optional<int64_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int64_t id) const;
  bool is_special(int64_t id) const;
  // Number of ids, added tokens included: the largest id + 1.
  int64_t vocab_size() const;

  int64_t eos_token_id() const;
  int64_t pad_token_id() const;
  int64_t unk_token_id() const;

  struct Impl;

 private:
  explicit SentencePieceTokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace mm
