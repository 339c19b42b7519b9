#include "mm/parallel/usp_attention.h"

#include "mm/core/error.h"
#include "mm/parallel/ring_attention.h"
#include "mm/parallel/ulysses_attention.h"

namespace mm::parallel {

at::Tensor usp_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::vector<SequenceShard>& shards, bool causal, double scale, const Group& ulysses,
                         const Group& ring) {
  const int64_t u = ulysses ? ulysses->getSize() : 1, r = ring ? ring->getSize() : 1;
  const int64_t ui = ulysses ? ulysses->getRank() : 0, ri = ring ? ring->getRank() : 0;
  MM_CHECK(static_cast<int64_t>(shards.size()) == u * r, "USP attention: ", shards.size(), " shards for ", u,
           " (ulysses) x ", r, " (ring) ranks");
  MM_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "USP attention: q, k, v must be [batch, heads, len, dim]");
  check_ulysses_heads(q.size(1), k.size(1), u);
  // One ring group: plain Ulysses, whose attention over the gathered sequence is SDPA's fused
  // kernel (the ring's blockwise form would compute the same through dense per-block scores).
  if (r == 1) return ulysses_attention(q, k, v, shards, causal, scale, ulysses);
  const auto& mine = shards[static_cast<size_t>(ri * u + ui)];
  MM_CHECK(q.size(2) == mine.size() && k.size(2) == mine.size() && v.size(2) == mine.size(), "USP attention: this rank holds ",
           mine.size(), " tokens but q, k, v have ", q.size(2), ", ", k.size(2), ", ", v.size(2));
  // Within the Ulysses group: its members' token counts. Across the ring: each group's tokens as one.
  std::vector<int64_t> lengths;
  for (int64_t j = 0; j < u; ++j) lengths.push_back(shards[static_cast<size_t>(ri * u + j)].size());
  std::vector<SequenceShard> ring_shards;
  for (int64_t i = 0; i < r; ++i)
    ring_shards.push_back(concatenated({shards.begin() + i * u, shards.begin() + (i + 1) * u}));
  const auto out = ring_attention(ulysses_scatter_heads(q, lengths, ulysses),
                                  ulysses_scatter_heads(ulysses_kv_heads(k, u), lengths, ulysses),
                                  ulysses_scatter_heads(ulysses_kv_heads(v, u), lengths, ulysses), ring_shards, causal,
                                  scale, ring);
  return ulysses_gather_heads(out, lengths, ulysses);
}

}  // namespace mm::parallel
