// Qwen-VL (Qwen2-VL, Qwen2.5-VL) training checkpoints and Hugging Face directories, both ways: the registry's
// export_checkpoint and as_training_checkpoint for the family.
#pragma once
#include <filesystem>

#include "mm/checkpoint/checkpoint_io.h"
#include "mm/models/qwen_vl/qwen_vl_model.h"

namespace mm {

// The model of a checkpoint as trained: its config.json, LoRA adapters re-attached when the run
// used them, a multi-token-prediction head when the run had one, every weight loaded (strictly,
// by name and shape).
QwenVLForConditionalGeneration load_checkpoint_model(const std::filesystem::path& checkpoint_dir);

// Writes the checkpoint's model as a Hugging Face directory into `out` (weights with LoRA
// merged, config, tokenizer and processor files).
void export_qwen_vl_checkpoint(const std::filesystem::path& checkpoint_dir, const std::filesystem::path& out);

// A Hugging Face Qwen-VL directory as a training checkpoint at step 0: its weights under the
// trainer's names (through the model, with a multi-token-prediction head as training loads it), fresh generators, the start of the data, no LoRA; its
// config, tokenizer and processor files to carry.
WholeTrainingCheckpoint qwen_vl_as_training_checkpoint(const std::filesystem::path& model_dir);

}  // namespace mm
