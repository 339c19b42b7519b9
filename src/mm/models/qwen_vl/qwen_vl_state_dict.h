// The Qwen-VL models' one name map between this module's parameters (visual.*, model.*, lm_head.*) and the
// Hugging Face checkpoint layout, used by both the loader and the export, so that the two cannot
// drift. transformers >= 4.52 writes model.visual.* and model.language_model.*; older checkpoints
// (visual.*, model.*) are this module's own names and load as they are.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace mm {

// The module parameter a checkpoint tensor loads into; "" skips it (the stored lm_head of a model
// with tied embeddings, which computes logits with the embedding matrix; Qwen3.5's mtp.* head
// unless the model was built with it, `keep_mtp`: it keeps the checkpoint's names).
std::string qwen_vl_module_name(const std::string& checkpoint_name, bool tied_embeddings, bool keep_mtp = false);

// The name transformers' save_pretrained gives the module parameter `module_name`.
std::string qwen_vl_hf_name(const std::string& module_name);

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Qwen3-VL-MoE checkpoints hold a sparse layer's experts fused, in one of two layouts: the
// published one (x @ W: <layer>.mlp.experts.gate_up_proj [experts, hidden, 2 * intermediate],
// <layer>.mlp.experts.down_proj [experts, intermediate, hidden]) and what transformers 5.17
// keeps in memory and save_pretrained writes (gate_up_proj [experts, 2 * intermediate, hidden],
// down_proj [experts, hidden, intermediate]). transformers tells them apart by shape, taking the
// in-memory one where both fit (hidden == 2 * intermediate), and so does split_fused_experts.
// The module holds the experts one by one (nn/moe.h): <layer>.mlp.experts.E.{gate,up,down}_proj.weight,
// [intermediate, hidden] twice and [hidden, intermediate]. split_fused_experts turns the fused
// tensors into these as views of the same (mapped) tensors, leaving every other tensor as it is,
// and throws mm::Error naming a fused tensor of neither layout or without its partner.
// fuse_experts is the inverse for the export, writing save_pretrained's layout.
NamedTensors split_fused_experts(NamedTensors tensors, int64_t hidden, int64_t intermediate);
NamedTensors fuse_experts(NamedTensors tensors);

}  // namespace mm
