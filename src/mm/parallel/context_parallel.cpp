#include "mm/parallel/context_parallel.h"

#include <torch/torch.h>

#include "mm/core/error.h"
#include "mm/core/host_to_device.h"
#include "mm/parallel/sequence_shards.h"
#include "mm/parallel/ulysses_attention.h"
#include "mm/parallel/usp_attention.h"

#include <cmath>

namespace mm::parallel {

ContextParallelGroups context_parallel_groups(const DeviceMesh& mesh, int64_t heads, const std::string& whose) {
  const int64_t cp = mesh.size(kContextParallelDims), ulysses = mesh.size(MeshDim::cp_ulysses);
  MM_CHECK(heads % ulysses == 0, "parallel.cp_ulysses=", ulysses, " (the Ulysses degree; cp=", cp,
           " when unset) does not divide ", whose, " ", heads,
           " attention heads: choose a degree that does, and ring attention across for the rest (cp = cp_ulysses x "
           "ring)");
  return {mesh.group(kContextParallelDims), mesh.group(MeshDim::cp_ulysses), mesh.group(MeshDim::cp_ring)};
}

SequenceSplitter sequence_splitter(const ContextParallelGroups& groups) {
  // The last split made, reused while the layout repeats (every step of a fixed-size video, every
  // layer of a model that asks per layer).
  struct Last {
    std::vector<int64_t> cu_seqlens;
    bool causal = false;
    std::shared_ptr<const SequenceSplit> split;
  };
  auto last = std::make_shared<Last>();
  return [groups, last](const std::vector<int64_t>& cu_seqlens, bool causal) {
    if (last->split && last->cu_seqlens == cu_seqlens && last->causal == causal) return last->split;
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
    split->ranks = world;
    split->rank = rank;
    split->cu_seqlens = cu_seqlens;
    // Ulysses' exchanges over the whole cp group (its ranks in cp order, as the shards are), with the
    // gathered tokens put from rank order into sequence order and back.
    split->to_heads = [group = groups.cp, sizes, inverse](const at::Tensor& x) {
      return ulysses_scatter_heads(x, sizes, group)
          .index_select(2, host_values_on(inverse, x.device()));
    };
    split->from_heads = [group = groups.cp, sizes, order](const at::Tensor& x) {
      return ulysses_gather_heads(x.index_select(2, host_values_on(order, x.device())), sizes, group);
    };
    split->sum = [group = groups.cp, world](const at::Tensor& x) {
      at::NoGradGuard no_grad;
      // Every rank's x stacked in rank order and added up: the same sum, in the same order, everywhere.
      return all_gather_along(x.unsqueeze(0), 0, std::vector<int64_t>(static_cast<size_t>(world), 1), group).sum(0);
    };
    split->gather = [group = groups.cp, sizes, inverse](const at::Tensor& x, int64_t dim) {
      const auto all = all_gather_along(x, dim, sizes, group);
      return all.index_select(dim, host_values_on(inverse, x.device()));
    };
    *last = {cu_seqlens, causal, split};
    return std::shared_ptr<const SequenceSplit>(std::move(split));
  };
}

std::vector<int64_t> contiguous_item_starts(const std::vector<int64_t>& costs, int64_t ranks) {
  const auto n = static_cast<int64_t>(costs.size());
  MM_CHECK(ranks >= 1 && n >= ranks, "context parallelism: ", n, " items cannot give each of ", ranks, " ranks one");
  std::vector<double> prefix(static_cast<size_t>(n) + 1, 0.0);
  for (int64_t i = 0; i < n; ++i) prefix[static_cast<size_t>(i) + 1] = prefix[static_cast<size_t>(i)] + static_cast<double>(costs[static_cast<size_t>(i)]);
  std::vector<int64_t> starts{0};
  for (int64_t r = 1; r < ranks; ++r) {
    // The boundary nearest the ideal share, leaving each rank before and after at least one item.
    const double ideal = prefix.back() * static_cast<double>(r) / static_cast<double>(ranks);
    int64_t best = starts.back() + 1;
    for (int64_t i = best; i <= n - (ranks - r); ++i)
      if (std::abs(prefix[static_cast<size_t>(i)] - ideal) < std::abs(prefix[static_cast<size_t>(best)] - ideal)) best = i;
    starts.push_back(best);
  }
  starts.push_back(n);
  return starts;
}

ItemSplitter item_splitter(const ContextParallelGroups& groups) {
  return [group = groups.cp](const std::vector<int64_t>& costs) {
    const int64_t world = group ? group->getSize() : 1, rank = group ? group->getRank() : 0;
    const auto items = static_cast<int64_t>(costs.size());
    ItemSplit split;
    if (items < world) {
      // Every rank encodes every item; each rank's decoder then reads its own tokens' features, so
      // the tower's gradients still add up over the group to those of one encoding.
      split.count = items;
      split.gather = [](const at::Tensor& rows, const std::vector<int64_t>&) { return rows; };
      return split;
    }
    const auto starts = contiguous_item_starts(costs, world);
    split.first = starts[static_cast<size_t>(rank)];
    split.count = starts[static_cast<size_t>(rank) + 1] - split.first;
    split.gather = [group, starts](const at::Tensor& rows, const std::vector<int64_t>& rows_per_item) {
      MM_CHECK(static_cast<int64_t>(rows_per_item.size()) == starts.back(),
               "context parallelism: rows for ", rows_per_item.size(), " items, dealt ", starts.back());
      std::vector<int64_t> sizes;
      for (size_t r = 0; r + 1 < starts.size(); ++r) {
        int64_t n = 0;
        for (auto i = starts[r]; i < starts[r + 1]; ++i) n += rows_per_item[static_cast<size_t>(i)];
        sizes.push_back(n);
      }
      return all_gather_along(rows, 0, sizes, group);
    };
    return split;
  };
}

}  // namespace mm::parallel
