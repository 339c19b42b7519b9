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
#include <torch/nn/module.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

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

// One parameter of one expert of a model's MoE layer, e.g. block "model.language_model.layers.0.mlp",
// expert 3, suffix "down_proj.weight" (its checkpoint name is block.experts.3.suffix).
struct ExpertParameter {
  std::string name, block, suffix;
  int64_t expert = 0;
  std::vector<int64_t> shape;  // as before it was released
  at::Tensor tensor;           // the module's tensor (empty while released)
  bool local = false;          // held by this rank
};

// Where a model's experts are after apply_expert_parallel: every expert parameter of every MoE
// layer, in the model's order (the same on every rank), and the group they are spread over.
struct ExpertPlacement {
  Group group;
  int64_t ep_size = 1, ep_rank = 0, experts_per_rank = 0;
  std::vector<ExpertParameter> params;
  bool holds(const std::string& name) const;      // a local expert's parameter
  bool elsewhere(const std::string& name) const;  // another rank's expert's parameter
  // Every other rank's expert parameter with the local one of the same block, suffix and local
  // index (same shape, same optimizer state): (theirs, ours).
  std::vector<std::pair<std::string, std::string>> counterparts() const;
};

// Expert parallelism over every SparseMoeBlock of `model` (found by type, so any family with MoE
// layers takes it): each gets the dispatch above and keeps only this rank's experts. Throws when
// the model has no MoE layer or the group size does not divide its experts.
ExpertPlacement apply_expert_parallel(torch::nn::Module& model, const Group& group);

// Fills every released expert parameter again with its owner's values (an all-gather over the
// group per local parameter, in `placement`'s order; collective): after training, for export.
// The local experts must hold their whole values. Takes the local tensors' dtype.
void gather_experts(ExpertPlacement& placement);

}  // namespace mm::parallel
