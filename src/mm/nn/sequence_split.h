// Context parallelism as a model sees it: this rank holds some of a sequence's tokens, and
// self-attention reaches the others through the split's attention. The training task builds the
// split from the mesh (parallel/context_parallel.h); a model only slices its per-token inputs with
// `take`, runs its layers on its tokens, attends through `attention`, and `gather`s what it needs
// whole. Hooks, like BlockRunner, so that models do not depend on the collectives.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace mm {

struct SequenceSplit {
  std::vector<int64_t> positions;  // this rank's tokens: indices into the whole sequence, in the order held
  int64_t total = 0;               // tokens in the whole sequence

  // q [batch, heads, local, dim], k and v [batch, kv_heads, local, dim] (this rank's tokens) ->
  // [batch, heads, local, dim]: attention over the whole sequence (causal or not as the split was made).
  std::function<at::Tensor(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale)> attention;
  // x with this rank's tokens along `dim` -> every rank's, in sequence order (differentiable).
  std::function<at::Tensor(const at::Tensor& x, int64_t dim)> gather;
  // The ranks that share the sequence, and the sum of a statistic over them (not differentiable:
  // counts that a loss over the whole sequence needs, e.g. the MoE load-balancing loss's).
  int64_t ranks = 1;
  std::function<at::Tensor(const at::Tensor& x)> sum;

  // Head parallelism, for layers that must run the whole sequence in order (a recurrence: Gated
  // DeltaNet) rather than attend through `attention`: x [batch, heads, local, dim] (this rank's
  // tokens, all heads) -> [batch, heads / ranks, total, dim], the whole sequence in order for this
  // rank's share of the heads (heads [rank * heads / ranks, (rank + 1) * heads / ranks)), and
  // `from_heads` back. Differentiable: the two all-to-alls of Ulysses over every rank of the split.
  int64_t rank = 0;                 // this rank's index among the `ranks`
  std::vector<int64_t> cu_seqlens;  // the whole sequence's documents [0, ..., total]
  std::function<at::Tensor(const at::Tensor& x)> to_heads, from_heads;

  // x's rows at this rank's positions along `dim` (x holds the whole sequence there).
  at::Tensor take(const at::Tensor& x, int64_t dim) const;
};

// The split of a sequence of documents (cu_seqlens: [0, end of document 0, ..., length]) for
// attention that is causal or not.
using SequenceSplitter =
    std::function<std::shared_ptr<const SequenceSplit>(const std::vector<int64_t>& cu_seqlens, bool causal)>;

// Independent items of a sample (images, video frames: a vision tower's attention never crosses
// one) dealt over the same ranks: this rank encodes items [first, first + count) and `gather`
// joins every rank's rows, in item order (differentiable: each rank gets back the gradient of its
// own rows summed over the ranks that used them).
struct ItemSplit {
  int64_t first = 0, count = 0;
  // rows: this rank's items' rows along dim 0; rows_per_item: every item's row count.
  std::function<at::Tensor(const at::Tensor& rows, const std::vector<int64_t>& rows_per_item)> gather;
};

// The deal of items with these costs (one per item, in order). Fewer items than ranks: every rank
// encodes all of them (first 0, count all, gather the identity).
using ItemSplitter = std::function<ItemSplit(const std::vector<int64_t>& costs)>;

}  // namespace mm
