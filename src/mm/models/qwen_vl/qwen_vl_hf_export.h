// Export of a Qwen-VL model (Qwen2-VL, Qwen2.5-VL) as a Hugging Face model directory that transformers'
// from_pretrained (and mmtrain's) loads: config.json, model.safetensors in the published layout
// (visual.*, model.embed_tokens.*, model.layers.*, model.norm.*, lm_head.*), plus the
// tokenizer/processor files of the model it was trained from.
#pragma once
#include <filesystem>
#include <vector>

#include "mm/models/qwen_vl/qwen_vl_model.h"

namespace mm {

// Writes out_dir with:
//   config.json         the model's config (transformers 5 layout) with its dtype
//   model.safetensors   every weight in the model's dtype; LoRA adapters merged into the copy
//                       written (weight + B @ A * alpha / rank), the live model is not changed
//   from assets_dir, the files hf_asset_files finds there
// Everything is written into a temporary sibling directory that is renamed to out_dir at the
// end (replacing an existing out_dir), so out_dir is never half-written. Throws mm::Error naming
// the path when assets_dir is not a directory or writing fails.
void export_hf(QwenVLForConditionalGeneration& model, const std::filesystem::path& assets_dir,
               const std::filesystem::path& out_dir);

// The files of a model directory besides its config and weights, those present in `dir`:
// generation_config.json, tokenizer.json, tokenizer_config.json, special_tokens_map.json,
// added_tokens.json, vocab.json, merges.txt, preprocessor_config.json,
// video_preprocessor_config.json, processor_config.json, chat_template.*
std::vector<std::filesystem::path> hf_asset_files(const std::filesystem::path& dir);

}  // namespace mm
