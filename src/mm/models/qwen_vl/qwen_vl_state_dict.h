// The Qwen-VL models' one name map between this module's parameters (visual.*, model.*, lm_head.*) and the
// Hugging Face checkpoint layout, used by both the loader and the export, so that the two cannot
// drift. transformers >= 4.52 writes model.visual.* and model.language_model.*; older checkpoints
// (visual.*, model.*) are this module's own names and load as they are.
#pragma once
#include <string>

namespace mm {

// The module parameter a checkpoint tensor loads into; "" skips it (the stored lm_head of a model
// with tied embeddings, which computes logits with the embedding matrix).
std::string qwen_vl_module_name(const std::string& checkpoint_name, bool tied_embeddings);

// The name transformers' save_pretrained gives the module parameter `module_name`.
std::string qwen_vl_hf_name(const std::string& module_name);

}  // namespace mm
