// `mmtrain export` and `mmtrain convert`: training checkpoints to the reference layout of their
// model family (a Hugging Face directory for Qwen2.5-VL, a diffusers pipeline directory for a Wan
// DiT), to a sharded checkpoint of N slices, and a Hugging Face directory to a sharded checkpoint.
// The family is read from the checkpoint's own config.json (model_type, or diffusers'
// _class_name); an unknown one is an error that names the supported ones.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

namespace mm {

// Writes the checkpoint `path` means (a step directory, its checkpoints/ folder or a run's output
// directory: the latest) into `out`, which must not exist or be empty and must lie outside any
// training run. Returns the checkpoint directory used.
std::filesystem::path export_checkpoint(const std::filesystem::path& path, const std::filesystem::path& out,
                                        const std::string& option = "--to-hf");

struct ConvertOptions {
  std::filesystem::path from;  // a training checkpoint (step dir, checkpoints/ or run dir) or an HF model dir
  std::filesystem::path to;    // must not exist (or be an empty directory)
  int64_t slices = 0;          // 0: write the family's reference layout; N >= 1: a sharded checkpoint
};

// Returns the source directory used.
std::filesystem::path convert_checkpoint(const ConvertOptions& options);

}  // namespace mm
