// Where a diffusers model directory keeps the Wan transformer's tensors, and which of them stay in
// fp32 whatever the load dtype (diffusers' _keep_in_fp32_modules).
#pragma once
#include <ATen/core/Tensor.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace mm {

struct NamedTensors {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;  // by checkpoint name
  std::string source;                                          // names them in errors
};

// diffusion_pytorch_model.safetensors, or the shards listed in
// diffusion_pytorch_model.safetensors.index.json (each tensor must be in the shard the index
// names), or else what Checkpoint::open finds (model.safetensors, its index, every *.safetensors).
NamedTensors read_diffusers_weights(const std::filesystem::path& dir);

// True for a parameter diffusers keeps in fp32 when loading in a lower precision: one whose dotted
// name has a component rope, time_embedder, scale_shift_table, norm1, norm2 or norm3.
bool wan_keeps_fp32(const std::string& parameter_name);

}  // namespace mm
