// Loading and saving module weights by Hugging Face parameter name. Every tensor the module
// declares must be in the checkpoint with exactly its shape; anything left over in the
// checkpoint is an error too, so a wrong architecture never loads silently.
#pragma once
#include <c10/util/typeid.h>
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

// Floating tensors created without an explicit dtype while this guard lives are `dtype`:
// a model built inside it for loading in bf16 never exists in fp32 first (which would need twice
// its bf16 memory at the peak). libtorch's default dtype is process-wide: hold it only while
// building a model, on the one thread that creates tensors then, and give every tensor that
// must stay fp32 (rotary frequencies) its dtype explicitly.
class DefaultDtypeGuard {
 public:
  explicit DefaultDtypeGuard(torch::Dtype dtype);
  ~DefaultDtypeGuard();
  DefaultDtypeGuard(const DefaultDtypeGuard&) = delete;
  DefaultDtypeGuard& operator=(const DefaultDtypeGuard&) = delete;

 private:
  caffe2::TypeMeta previous_;
};

// Pairs every parameter and buffer of `module` with its checkpoint tensor, by module name, after
// the checks load_weights makes (nothing is copied or read: the tensors stay views of the mapped
// files). Throws mm::Error listing missing, unexpected and mis-shaped tensors by name. For
// sharded training, where each rank copies only the rows it keeps.
std::vector<std::pair<std::string, torch::Tensor>> match_weights(
    const torch::nn::Module& module, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
    const std::string& source, const WeightLoadOptions& options = {});
std::vector<std::pair<std::string, torch::Tensor>> match_weights(const torch::nn::Module& module,
                                                                 const Checkpoint& checkpoint,
                                                                 const WeightLoadOptions& options = {});

// Copies every parameter and buffer of `module` from `checkpoint` (converting to the module's
// dtype and device), one tensor at a time, dropping each source tensor's mapped file pages
// from memory once copied (release_mapped_pages). Throws mm::Error listing missing, unexpected
// and mis-shaped tensors by name.
void load_weights(torch::nn::Module& module, const Checkpoint& checkpoint,
                  const WeightLoadOptions& options = {});

// The same from tensors by name (views of mapped files are released as above); `source` names
// them in errors (a file, a checkpoint directory).
void load_weights(torch::nn::Module& module, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                  const std::string& source, const WeightLoadOptions& options = {});

// Parameters and buffers by name, in registration order (for saving).
std::vector<std::pair<std::string, torch::Tensor>> named_weights(const torch::nn::Module& module);

}  // namespace mm
