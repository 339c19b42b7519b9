// Loading and saving module weights by Hugging Face parameter name. Every tensor the module
// declares must be in the checkpoint with exactly its shape; anything left over in the
// checkpoint is an error too, so a wrong architecture never loads silently.
#pragma once
#include <torch/nn/module.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace mm {

class Checkpoint;

struct WeightLoadOptions {
  // Maps a checkpoint name to the module's name; returns "" for a tensor to skip on purpose.
  std::function<std::string(const std::string&)> checkpoint_to_module;
  // Module names that may be absent from the checkpoint (e.g. a tied lm_head.weight).
  std::vector<std::string> optional;
};

// Copies every parameter and buffer of `module` from `checkpoint` (converting to the module's
// dtype). Throws mm::Error listing missing, unexpected and mis-shaped tensors by name.
void load_weights(torch::nn::Module& module, const Checkpoint& checkpoint,
                  const WeightLoadOptions& options = {});

// The same from tensors by name; `source` names them in errors (a file, a checkpoint directory).
void load_weights(torch::nn::Module& module, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                  const std::string& source, const WeightLoadOptions& options = {});

// Parameters and buffers by name, in registration order (for saving).
std::vector<std::pair<std::string, torch::Tensor>> named_weights(const torch::nn::Module& module);

}  // namespace mm
