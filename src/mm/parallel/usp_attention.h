// USP, unified sequence parallelism (Fang & Zhao, arXiv 2405.07719; Megatron's cp_comm_type
// "a2a+p2p"): a context-parallel group of ulysses x ring ranks. Ulysses runs inside each group of
// `ulysses` ranks (an all-to-all gives each its share of the heads over the group's tokens), ring
// attention runs across the `ring` such groups over those head shares, and the second all-to-all
// turns the output back. The degree may so exceed the head count: only `ulysses` must divide the
// heads. Ulysses is the inner dimension: rank (ring index i, ulysses index j) is cp rank
// i * ulysses + j and holds shards[i * ulysses + j].
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

#include "mm/parallel/autograd_collectives.h"
#include "mm/parallel/sequence_shards.h"

namespace mm::parallel {

// q [batch, heads, local, dim], k and v [batch, kv_heads, local, dim]: this rank's tokens in the
// order of its shard; shards: every cp rank's, in cp rank order. ulysses, ring: this rank's two
// groups (null: of one rank). Returns this rank's output [batch, heads, local, dim].
at::Tensor usp_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::vector<SequenceShard>& shards, bool causal, double scale, const Group& ulysses,
                         const Group& ring);

}  // namespace mm::parallel
