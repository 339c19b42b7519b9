#include "mm/parallel/context_parallel.h"

#include <torch/torch.h>

#include "mm/core/error.h"
#include "mm/parallel/sequence_shards.h"
#include "mm/parallel/usp_attention.h"

namespace mm::parallel {

SequenceSplitter sequence_splitter(const ContextParallelGroups& groups) {
  return [groups](const std::vector<int64_t>& cu_seqlens, bool causal) {
    const int64_t world = groups.cp ? groups.cp->getSize() : 1, rank = groups.cp ? groups.cp->getRank() : 0;
    const int64_t u = groups.ulysses ? groups.ulysses->getSize() : 1, r = groups.ring ? groups.ring->getSize() : 1;
    MM_CHECK(u * r == world, "context parallelism: ulysses ", u, " x ring ", r, " ranks, but the cp group has ", world);
    auto shards = causal ? zigzag_shards(cu_seqlens, world) : contiguous_shards(cu_seqlens, world);
    auto split = std::make_shared<SequenceSplit>();
    split->positions = shards[static_cast<size_t>(rank)].positions;
    split->total = cu_seqlens.back();
    split->attention = [groups, shards, causal](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                double scale) {
      return usp_attention(q, k, v, shards, causal, scale, groups.ulysses, groups.ring);
    };
    // Every rank's tokens in rank order, then put back in sequence order.
    std::vector<int64_t> sizes, order;
    for (const auto& s : shards) {
      sizes.push_back(s.size());
      order.insert(order.end(), s.positions.begin(), s.positions.end());
    }
    std::vector<int64_t> inverse(order.size());
    for (size_t i = 0; i < order.size(); ++i) inverse[static_cast<size_t>(order[i])] = static_cast<int64_t>(i);
    split->gather = [group = groups.cp, sizes, inverse](const at::Tensor& x, int64_t dim) {
      const auto all = all_gather_along(x, dim, sizes, group);
      return all.index_select(dim, torch::tensor(inverse, torch::TensorOptions().dtype(torch::kInt64)).to(x.device()));
    };
    return std::shared_ptr<const SequenceSplit>(std::move(split));
  };
}

}  // namespace mm::parallel
