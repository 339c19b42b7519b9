// Ulysses attention (DeepSpeed-Ulysses, arXiv 2309.14509): the ranks of a context-parallel group
// each hold a part of the sequence with all heads; an all-to-all turns that into all of the
// sequence with a part of the heads, each rank attends over the whole sequence for its heads, and
// a second all-to-all turns the output back. Backward is the same exchanges reversed (autograd
// through parallel/autograd_collectives.h). The degree must divide the query heads; key/value
// heads fewer than the degree are replicated to it when the degree is a multiple of their count
// (grouped-query attention: each rank then holds the one its query heads read); otherwise the
// configuration is refused (USP, Ulysses x ring, runs those).
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

#include "mm/parallel/autograd_collectives.h"
#include "mm/parallel/sequence_shards.h"

namespace mm::parallel {

// The two exchanges, for USP too: [batch, heads, local, dim] (this rank's tokens, all heads) ->
// [batch, heads / P, sum(lengths), dim] (every rank's tokens in rank order, this rank's share of
// the heads), and back. lengths: every rank's token count. A null group: the identity.
at::Tensor ulysses_scatter_heads(const at::Tensor& x, const std::vector<int64_t>& lengths, const Group& group);
at::Tensor ulysses_gather_heads(const at::Tensor& x, const std::vector<int64_t>& lengths, const Group& group);

// Key/value heads replicated up to `degree` when there are fewer (each rank then holds the one its
// query heads read), else as they are.
at::Tensor ulysses_kv_heads(const at::Tensor& kv, int64_t degree);

// The refusal, as an error naming both numbers, when `degree` ranks cannot split these heads.
void check_ulysses_heads(int64_t heads, int64_t kv_heads, int64_t degree);

// q [batch, heads, local, dim], k and v [batch, kv_heads, local, dim]: this rank's tokens in the
// order of shards[rank]; shards: every rank's. Returns this rank's output [batch, heads, local, dim].
at::Tensor ulysses_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const std::vector<SequenceShard>& shards, bool causal, double scale, const Group& group);

}  // namespace mm::parallel
