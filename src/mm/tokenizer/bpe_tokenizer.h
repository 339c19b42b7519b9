// mm::Tokenizer: byte-level BPE loaded from a Hugging Face tokenizer.json (the Qwen2 family and
// GPT-2-style tokenizers), giving the same ids as the `tokenizers` library.
//
// encode(text): added/special tokens are matched in the raw text first and never split; the
// rest is normalized (e.g. NFC), pre-tokenized (regex split + byte-level mapping) and merged by
// BPE rank. The post-processor's template (TemplateProcessing) may add special tokens around them.
//
// Bytes that are not valid UTF-8: encode takes bytes and replaces each maximal invalid subpart
// with U+FFFD first — the ids are those `tokenizers` gives for
// `bytes.decode("utf-8", errors="replace")`. decode returns valid UTF-8: byte sequences that do
// not form UTF-8 come out as U+FFFD, as `tokenizers`' ByteLevel decoder does.
//
// Thread-safe: a Tokenizer is immutable apart from an internal, locked word cache; copies share
// their state.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mm {

class Tokenizer {
 public:
  // A model or tokenizer directory: tokenizer.json, plus tokenizer_config.json when present
  // (bos/eos/pad/unk tokens, and added_tokens_decoder entries missing from tokenizer.json).
  static Tokenizer from_dir(const std::filesystem::path& dir);
  // A tokenizer.json alone: no named special tokens.
  static Tokenizer from_file(const std::filesystem::path& tokenizer_json);

  // add_special_tokens: wrap the ids in the post-processor's template (TemplateProcessing), as
  // `tokenizers` does by default; Qwen's template adds nothing.
  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // Unknown ids are skipped, as in `tokenizers`; skip_special_tokens drops added tokens marked
  // special (e.g. <|im_end|>).
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const;

  std::optional<int64_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int64_t id) const;
  bool is_special(int64_t id) const;
  // Number of ids, added tokens included: the largest id + 1 (rows an embedding needs at least).
  int64_t vocab_size() const;

  // Named special tokens from tokenizer_config.json (nullopt when absent or null).
  const std::optional<std::string>& bos_token() const;
  const std::optional<std::string>& eos_token() const;
  const std::optional<std::string>& pad_token() const;
  const std::optional<std::string>& unk_token() const;
  std::optional<int64_t> bos_token_id() const;
  std::optional<int64_t> eos_token_id() const;
  std::optional<int64_t> pad_token_id() const;
  std::optional<int64_t> unk_token_id() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace mm
