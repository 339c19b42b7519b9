// The BPE model of a Hugging Face tokenizer.json ("model": {"type": "BPE", ...}): vocabulary,
// ranked merges, and the merge loop of `tokenizers` (lowest rank first, leftmost on ties),
// with a thread-safe cache of already encoded words.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mm {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // `model` is tokenizer.json's "model" object; errors name `file` and the field.
  static BpeModel from_json(const nlohmann::json& model, const std::string& file);

  BpeModel(BpeModel&&) noexcept;
  BpeModel& operator=(BpeModel&&) noexcept;
  ~BpeModel();

  // Appends the ids of one pre-tokenized word (already in the model's alphabet).
  void encode_word(std::string_view word, std::vector<int64_t>& ids) const;

  std::optional<int64_t> token_to_id(std::string_view token) const;
  const StringMap<int32_t>& vocab() const { return vocab_; }

 private:
  BpeModel();
  void merge_word(std::string_view word, std::vector<int32_t>& ids) const;

  struct MergeTarget {
    int32_t rank;
    int32_t new_id;
  };
  struct WordCache;

  StringMap<int32_t> vocab_;
  std::unordered_map<char32_t, int32_t> char_ids_;  // single-character tokens, for speed
  std::unordered_map<uint64_t, MergeTarget> merges_;  // (left id << 32 | right id) -> target
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::unique_ptr<WordCache> cache_;
};

}  // namespace mm
