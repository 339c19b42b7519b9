// Expert parallelism for the sparse MoE blocks (nn/moe.h): the num_experts experts are cut into
// ep contiguous ranges, rank p of the ep group holding experts [p * E / ep, (p + 1) * E / ep).
// Each rank routes its own tokens, sends every assignment to the rank holding its expert and
// gets the expert's output back (two all-to-alls of rows with counts that change every step:
// dropless, no capacity factor), then adds them up with the routing weights exactly as the
// single-process block does: in expert order, each expert's tokens in token order. Gradients
// travel the same way back (parallel/autograd_collectives.h), so an expert's gradient holds the
// contributions of every rank's tokens, and the router's gradient is each rank's own, reduced
// over data parallelism as every other replicated parameter.
#pragma once
#include <cstdint>

#include "mm/nn/moe.h"
#include "mm/parallel/autograd_collectives.h"

namespace mm::parallel {

struct ExpertRange {
  int64_t first = 0, count = 0;  // experts [first, first + count)
  bool contains(int64_t e) const { return e >= first && e < first + count; }
};

// Rank ep_rank's experts; throws mm::Error naming both numbers when ep_size does not divide
// num_experts.
ExpertRange local_experts(int64_t num_experts, int64_t ep_size, int64_t ep_rank);

// Installs the expert-parallel dispatch on `block` over `group` (every rank of the group must run
// the block's forward and backward the same number of times, as the collectives pair them) and
// releases the parameters of the experts other ranks hold: they become empty tensors that need no
// gradient, so that a rank keeps only its share. Returns this rank's experts. A null group (one
// rank) leaves the block as it is.
ExpertRange apply_expert_parallel(SparseMoeBlockImpl& block, const Group& group);

}  // namespace mm::parallel
