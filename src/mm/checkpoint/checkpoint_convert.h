// `mmtrain convert`: checkpoints between layouts. A training checkpoint of any layout (one
// process, or sharded by any number of ranks) becomes a Hugging Face model directory, or a
// sharded training checkpoint cut into N slices; a Hugging Face model directory becomes a
// sharded training checkpoint at step 0 (what a run started from those weights would resume).
#pragma once
#include <cstdint>
#include <filesystem>

namespace mm {

struct ConvertOptions {
  std::filesystem::path from;  // a training checkpoint (step dir, checkpoints/ or run dir) or an HF model dir
  std::filesystem::path to;    // must not exist (or be an empty directory)
  int64_t slices = 0;          // 0: write a Hugging Face model directory; N >= 1: a sharded checkpoint
};

// Returns the source directory used.
std::filesystem::path convert_checkpoint(const ConvertOptions& options);

}  // namespace mm
