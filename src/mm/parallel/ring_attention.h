// Ring attention (Liu et al., arXiv 2310.01889): each rank of a context-parallel group keeps its
// queries and passes its key/value block around the ring, so after `ranks` steps every query has
// met every key while no rank ever holds more than two blocks. Each step's partial attention is
// merged into the running result by its log-sum-exp (nn/blockwise_attention.h); the next block's
// transfer is posted before the current block's compute, so the two overlap.
//
// Backward (a custom autograd function, not autograd through the steps, which would keep every
// block alive): the blocks go around the ring again, each rank adds its queries' contribution
// to the visiting block's dK/dV, which travel with the block and come home after the last step
// (the second ring), while dQ accumulates locally from the final output and log-sum-exp.
//
// Who sees whom comes from the shards (parallel/sequence_shards.h): non-causal on a contiguous
// split (Wan), causal on the zig-zag split, packed documents split per document; blocks a rank's
// queries cannot see at all are skipped. A null group is one rank (plain attention).
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

#include "mm/parallel/autograd_collectives.h"
#include "mm/parallel/sequence_shards.h"

namespace mm::parallel {

// q [batch, heads, local, dim], k and v [batch, kv_heads, local, dim] hold this rank's tokens in
// the order of shards[rank]; shards: every rank's (the same on all). Returns this rank's output
// [batch, heads, local, dim] in q's dtype.
at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const std::vector<SequenceShard>& shards, bool causal, double scale, const Group& group);

// Seconds this process has waited for ring transfers (forward and backward: the part of each
// transfer the block's compute did not hide) since the last call.
double take_ring_wait_seconds();

}  // namespace mm::parallel
