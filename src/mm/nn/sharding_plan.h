// A model's plan for sharded data parallelism (FSDP): how its parameters are cut into units. Every
// transformer block is a unit (it runs through the BlockRunner hook, which gathers it before and
// frees it after), and the parameters outside the blocks form "root" units. A plan is a plain
// description, so that each model family states its own (models/<family>/<family>_sharding.h)
// and parallel/fully_shard.h carries it out.
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>

#include <string>
#include <utility>
#include <vector>

namespace mm {

enum class ShardPlacement { shard, replicate };

struct ShardUnit {
  std::string name;                    // "model.layers.3", "language root" ... (logs, errors)
  torch::nn::Module* block = nullptr;  // the module a BlockRunner is called with; null: a root unit
  std::vector<std::pair<std::string, at::Tensor>> params;  // the unit's parameters by checkpoint name
  ShardPlacement placement = ShardPlacement::shard;
};

// Blocks `prefix` + i of a module list, each its own unit.
struct ShardBlocks {
  torch::nn::ModuleList* blocks;
  std::string prefix;  // "model.layers."
  ShardPlacement placement;
};

// The parameters outside every block whose name starts with `prefix` ("" takes all the rest).
struct ShardRoot {
  std::string name;
  std::string prefix;
  ShardPlacement placement;
};

// The units of `model`: the blocks of each list in order, then the roots that received any
// parameter (each parameter outside the blocks goes to the first root whose prefix it has).
std::vector<ShardUnit> sharding_plan(torch::nn::Module& model, const std::vector<ShardBlocks>& blocks,
                                     const std::vector<ShardRoot>& roots);

}  // namespace mm
