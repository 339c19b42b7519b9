#include "mm/tokenizer/bpe_model.h"

#include <algorithm>
#include <mutex>
#include <nlohmann/json.hpp>
#include <shared_mutex>

#include "mm/core/error.h"
#include "mm/tokenizer/unicode_text.h"

namespace mm {

// Words seen before are looked up instead of merged again. Like `tokenizers`, the cache stops
// growing when full rather than evicting, and very long words are not cached.
struct BpeModel::WordCache {
  static constexpr size_t kCapacity = 200000;
  static constexpr size_t kMaxWordBytes = 256;
  std::shared_mutex mutex;
  StringMap<std::vector<int32_t>> words;
};

BpeModel::BpeModel() : cache_(std::make_unique<WordCache>()) {}
BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel& BpeModel::operator=(BpeModel&&) noexcept = default;
BpeModel::~BpeModel() = default;

namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// Optional string fields that must be null or empty: the features they enable are not
// implemented, and silently ignoring them would give wrong ids.
void require_empty_string(const nlohmann::json& model, const char* key, const std::string& where) {
  if (!model.contains(key) || model[key].is_null()) return;
  MM_CHECK(model[key].is_string() && model[key].get<std::string>().empty(), where, key, ": ",
           model[key].dump(), " is not supported (expected null or \"\")");
}

bool get_bool(const nlohmann::json& model, const char* key, const std::string& where) {
  if (!model.contains(key) || model[key].is_null()) return false;
  MM_CHECK(model[key].is_boolean(), where, key, ": expected true or false, got ", model[key].dump());
  return model[key].get<bool>();
}

std::pair<std::string, std::string> parse_merge(const nlohmann::json& merge, const std::string& where) {
  if (merge.is_string()) {
    const std::string& line = merge.get_ref<const std::string&>();
    const size_t space = line.find(' ');
    MM_CHECK(space != std::string::npos && line.find(' ', space + 1) == std::string::npos, where,
             ": expected two tokens separated by one space, got ", merge.dump());
    return {line.substr(0, space), line.substr(space + 1)};
  }
  MM_CHECK(merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string(),
           where, ": expected \"left right\" or [\"left\", \"right\"], got ", merge.dump());
  return {merge[0].get<std::string>(), merge[1].get<std::string>()};
}

}  // namespace

BpeModel BpeModel::from_json(const nlohmann::json& model, const std::string& file) {
  const std::string where = file + ": model.";
  MM_CHECK(model.is_object(), file, ": model: expected an object");
  BpeModel bpe;

  MM_CHECK(model.contains("vocab"), where, "vocab: missing");
  const auto& vocab = model["vocab"];
  MM_CHECK(vocab.is_object(), where, "vocab: expected an object of token -> id");
  bpe.vocab_.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    MM_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < INT32_MAX,
             where, "vocab[\"", token, "\"]: expected a non-negative integer id, got ", id.dump());
    bpe.vocab_.emplace(token, id.get<int32_t>());
    size_t pos = 0;
    if (!token.empty() && unicode::is_valid_utf8(token)) {
      const char32_t cp = unicode::next_code_point(token, pos);
      if (pos == token.size()) bpe.char_ids_.emplace(cp, id.get<int32_t>());
    }
  }

  MM_CHECK(model.contains("merges"), where, "merges: missing (a BPE model needs its merges)");
  const auto& merges = model["merges"];
  MM_CHECK(merges.is_array(), where, "merges: expected an array");
  bpe.merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string at = str_cat(where, "merges[", rank, "]");
    const auto [left, right] = parse_merge(merges[rank], at);
    auto id_of = [&](const std::string& token) {
      auto it = bpe.vocab_.find(token);
      MM_CHECK(it != bpe.vocab_.end(), at, ": token \"", token, "\" is not in model.vocab");
      return it->second;
    };
    const int32_t l = id_of(left), r = id_of(right), merged = id_of(left + right);
    // A later duplicate must not override the better rank.
    bpe.merges_.try_emplace(pair_key(l, r), MergeTarget{static_cast<int32_t>(rank), merged});
  }

  if (model.contains("dropout") && !model["dropout"].is_null()) {
    MM_CHECK(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0, where,
             "dropout: ", model["dropout"].dump(), " is not supported (BPE dropout is random; expected null)");
  }
  require_empty_string(model, "continuing_subword_prefix", where);
  require_empty_string(model, "end_of_word_suffix", where);
  MM_CHECK(!get_bool(model, "byte_fallback", where), where, "byte_fallback: true is not supported");
  bpe.fuse_unk_ = get_bool(model, "fuse_unk", where);
  bpe.ignore_merges_ = get_bool(model, "ignore_merges", where);
  if (model.contains("unk_token") && !model["unk_token"].is_null()) {
    MM_CHECK(model["unk_token"].is_string(), where, "unk_token: expected a string or null");
    auto it = bpe.vocab_.find(model["unk_token"].get<std::string>());
    MM_CHECK(it != bpe.vocab_.end(), where, "unk_token: ", model["unk_token"].dump(),
             " is not in model.vocab");
    bpe.unk_id_ = it->second;
  }
  return bpe;
}

std::optional<int64_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::encode_word(std::string_view word, std::vector<int64_t>& ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= WordCache::kMaxWordBytes;
  if (cacheable) {
    std::shared_lock lock(cache_->mutex);
    if (auto it = cache_->words.find(word); it != cache_->words.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> word_ids;
  merge_word(word, word_ids);
  ids.insert(ids.end(), word_ids.begin(), word_ids.end());
  if (cacheable) {
    std::unique_lock lock(cache_->mutex);
    if (cache_->words.size() < WordCache::kCapacity) cache_->words.emplace(word, std::move(word_ids));
  }
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& ids) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    // std::push_heap builds a max-heap: invert so the lowest rank, then leftmost, is on top.
    bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> queue;
  symbols.clear();
  queue.clear();

  for (size_t pos = 0; pos < word.size();) {
    const size_t start = pos;
    const char32_t cp = unicode::next_code_point(word, pos);
    int32_t id = -1;
    if (auto it = char_ids_.find(cp); it != char_ids_.end()) {
      id = it->second;
    } else if (auto it2 = vocab_.find(word.substr(start, pos - start)); it2 != vocab_.end()) {
      id = it2->second;
    } else if (unk_id_) {
      if (fuse_unk_ && !symbols.empty() && symbols.back().id == *unk_id_) continue;
      id = *unk_id_;
    } else {
      continue;  // `tokenizers` drops characters it has no id for when there is no unk token
    }
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, -1, true});
    if (n > 0) symbols[n - 1].next = n;
  }

  auto push_candidate = [&](int32_t pos, int32_t left, int32_t right) {
    if (auto it = merges_.find(pair_key(left, right)); it != merges_.end()) {
      queue.push_back({it->second.rank, pos, it->second.new_id});
      std::push_heap(queue.begin(), queue.end());
    }
  };
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    push_candidate(static_cast<int32_t>(i), symbols[i].id, symbols[i + 1].id);
  }
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end());
    const Candidate top = queue.back();
    queue.pop_back();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    // Stale candidate: one of the two symbols changed since it was queued.
    auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) push_candidate(left.prev, symbols[left.prev].id, left.id);
    if (left.next >= 0) push_candidate(top.pos, left.id, symbols[left.next].id);
  }
  for (const Symbol& s : symbols) {
    if (s.alive) ids.push_back(s.id);
  }
}

}  // namespace mm
