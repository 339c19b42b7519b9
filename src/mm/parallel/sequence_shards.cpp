#include "mm/parallel/sequence_shards.h"

#include <torch/torch.h>

#include <algorithm>

#include "mm/core/error.h"

namespace mm::parallel {
namespace {

void check_boundaries(const std::vector<int64_t>& cu_seqlens, int64_t ranks) {
  MM_CHECK(ranks >= 1, "sequence shards: ", ranks, " ranks");
  MM_CHECK(cu_seqlens.size() >= 2 && cu_seqlens.front() == 0,
           "sequence shards: cu_seqlens must start at 0 and hold at least one document, got ", c10::str(cu_seqlens));
  for (size_t i = 1; i < cu_seqlens.size(); ++i)
    MM_CHECK(cu_seqlens[i] > cu_seqlens[i - 1], "sequence shards: cu_seqlens must increase strictly, got ",
             c10::str(cu_seqlens));
}

// [begin, end) of part `i` of `n` near-equal parts of [0, length): the first length % n one longer.
std::pair<int64_t, int64_t> part(int64_t length, int64_t n, int64_t i) {
  const int64_t base = length / n, extra = length % n;
  const int64_t begin = i * base + std::min(i, extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

void append(SequenceShard& shard, int64_t begin, int64_t end, int64_t document) {
  for (int64_t p = begin; p < end; ++p) {
    shard.positions.push_back(p);
    shard.documents.push_back(document);
  }
}

// The document of every position of the sequence.
std::vector<int64_t> documents_of(const std::vector<int64_t>& cu_seqlens) {
  std::vector<int64_t> out;
  for (size_t d = 0; d + 1 < cu_seqlens.size(); ++d)
    out.insert(out.end(), static_cast<size_t>(cu_seqlens[d + 1] - cu_seqlens[d]), static_cast<int64_t>(d));
  return out;
}

}  // namespace

std::vector<SequenceShard> contiguous_shards(const std::vector<int64_t>& cu_seqlens, int64_t ranks) {
  check_boundaries(cu_seqlens, ranks);
  const auto documents = documents_of(cu_seqlens);
  std::vector<SequenceShard> shards(static_cast<size_t>(ranks));
  for (int64_t r = 0; r < ranks; ++r) {
    const auto [begin, end] = part(cu_seqlens.back(), ranks, r);
    for (int64_t p = begin; p < end; ++p) append(shards[static_cast<size_t>(r)], p, p + 1, documents[static_cast<size_t>(p)]);
  }
  return shards;
}

std::vector<SequenceShard> zigzag_shards(const std::vector<int64_t>& cu_seqlens, int64_t ranks) {
  check_boundaries(cu_seqlens, ranks);
  std::vector<SequenceShard> shards(static_cast<size_t>(ranks));
  for (size_t d = 0; d + 1 < cu_seqlens.size(); ++d) {
    const int64_t start = cu_seqlens[d], length = cu_seqlens[d + 1] - start;
    for (int64_t r = 0; r < ranks; ++r)
      for (const int64_t chunk : {r, 2 * ranks - 1 - r}) {
        const auto [begin, end] = part(length, 2 * ranks, chunk);
        append(shards[static_cast<size_t>(r)], start + begin, start + end, static_cast<int64_t>(d));
      }
  }
  return shards;
}

SequenceShard concatenated(const std::vector<SequenceShard>& shards) {
  SequenceShard out;
  for (const auto& s : shards) {
    out.positions.insert(out.positions.end(), s.positions.begin(), s.positions.end());
    out.documents.insert(out.documents.end(), s.documents.begin(), s.documents.end());
  }
  return out;
}

at::Tensor attention_allowed(const SequenceShard& queries, const SequenceShard& keys, bool causal) {
  MM_CHECK(queries.positions.size() == queries.documents.size() && keys.positions.size() == keys.documents.size(),
           "attention_allowed: a shard's positions and documents differ in length");
  auto column = [](const std::vector<int64_t>& values) {
    return torch::tensor(values, torch::kInt64);
  };
  const auto q_doc = column(queries.documents).unsqueeze(1), k_doc = column(keys.documents).unsqueeze(0);
  auto allowed = q_doc == k_doc;
  if (causal) allowed &= column(keys.positions).unsqueeze(0) <= column(queries.positions).unsqueeze(1);
  return allowed;
}

bool sees_everything(const SequenceShard& queries, const SequenceShard& keys, bool causal) {
  if (causal) return false;
  auto one_document = [](const SequenceShard& s) {
    return std::all_of(s.documents.begin(), s.documents.end(), [&](int64_t d) { return d == s.documents.front(); });
  };
  return one_document(queries) && one_document(keys) &&
         (queries.documents.empty() || keys.documents.empty() || queries.documents.front() == keys.documents.front());
}

}  // namespace mm::parallel
