// Training checkpoints back to Hugging Face model directories (`mmtrain export`).
#pragma once
#include <filesystem>

#include "mm/models/vlm_model.h"

namespace mm {

// Finds the checkpoint `path` means: a step directory itself, or the latest one of a
// checkpoints/ folder or of a run's output directory. Throws naming the path when none.
std::filesystem::path resolve_training_checkpoint(const std::filesystem::path& path);

// The model of a checkpoint as trained: its config.json, LoRA adapters re-attached when the run
// used them, every weight loaded (strictly, by name and shape).
Qwen2_5_VLForConditionalGeneration load_checkpoint_model(const std::filesystem::path& checkpoint_dir);

// Writes the checkpoint's model as a Hugging Face directory into `out` (weights with LoRA
// merged, config, tokenizer and processor files). Returns the checkpoint directory used.
std::filesystem::path export_training_checkpoint(const std::filesystem::path& path, const std::filesystem::path& out);

}  // namespace mm
