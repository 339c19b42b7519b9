#include "mm/tokenizer/unigram_model.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "mm/core/error.h"

namespace mm {
namespace {

constexpr double kUnkPenalty = 10.0;  // tokenizers' K_UNK_PENALTY

size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;  // a stray continuation byte: one byte at a time
}

}  // namespace

UnigramModel::UnigramModel(std::vector<std::string> pieces, const std::vector<double>& scores, int64_t unk_id)
    : pieces_(std::move(pieces)), scores_(scores), unk_id_(unk_id) {
  MM_CHECK(pieces_.size() == scores_.size() && !pieces_.empty(), "Unigram model: pieces and scores must pair up");
  MM_CHECK(unk_id_ >= 0 && unk_id_ < size(), "Unigram model: unk id ", unk_id_, " outside the vocabulary");
  double min_score = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < pieces_.size(); ++i) {
    ids_.emplace(pieces_[i], static_cast<int64_t>(i));  // the first of duplicate pieces wins, as in the trie
    min_score = std::min(min_score, scores_[i]);
    if (pieces_[i].empty()) continue;
    auto& lengths = lengths_by_first_byte_[static_cast<unsigned char>(pieces_[i][0])];
    if (std::find(lengths.begin(), lengths.end(), pieces_[i].size()) == lengths.end()) lengths.push_back(pieces_[i].size());
  }
  for (auto& lengths : lengths_by_first_byte_) std::sort(lengths.begin(), lengths.end());  // the trie's order
  unk_score_ = min_score - kUnkPenalty;
}

int64_t UnigramModel::piece_to_id(std::string_view piece) const {
  const auto it = ids_.find(std::string(piece));
  return it == ids_.end() ? -1 : it->second;
}

void UnigramModel::encode(std::string_view word, std::vector<int64_t>& ids) const {
  struct Node {
    double score = 0;
    std::optional<size_t> start;
    int64_t id = -1;
  };
  const size_t n = word.size();
  std::vector<Node> best(n + 1);
  size_t start = 0;
  while (start < n) {
    const double here = best[start].score;
    const size_t char_length = std::min(utf8_length(static_cast<unsigned char>(word[start])), n - start);
    bool single = false;
    for (const size_t length : lengths_by_first_byte_[static_cast<unsigned char>(word[start])]) {
      if (start + length > n) break;
      const auto it = ids_.find(std::string(word.substr(start, length)));
      if (it == ids_.end()) continue;
      Node& target = best[start + length];
      const double candidate = scores_[static_cast<size_t>(it->second)] + here;
      if (!target.start || candidate > target.score) target = {candidate, start, it->second};
      if (length == char_length) single = true;
    }
    if (!single) {
      Node& target = best[start + char_length];
      const double candidate = unk_score_ + here;
      if (!target.start || candidate > target.score) target = {candidate, start, unk_id_};
    }
    start += char_length;
  }
  // Back from the end; runs of <unk> become one (fuse_unk).
  std::vector<int64_t> reversed;
  for (size_t end = n; end > 0;) {
    const Node& node = best[end];
    if (!(node.id == unk_id_ && !reversed.empty() && reversed.back() == unk_id_)) reversed.push_back(node.id);
    end = *node.start;
  }
  ids.insert(ids.end(), reversed.rbegin(), reversed.rend());
}

}  // namespace mm
