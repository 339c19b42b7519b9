// `mmtrain convert --slices N`: a training checkpoint's whole tensors (from one of any layout, or
// from a model directory through the registry) cut into the sharded layout of N slices, which a
// run on any number of processes resumes from.
#pragma once
#include <cstdint>
#include <filesystem>

#include "mm/checkpoint/checkpoint_io.h"

namespace mm {

// Writes `to` (a directory the caller checked is free) as a sharded training checkpoint of
// `slices` slices: each tensor cut on dim 0 into row ranges, whole.rng for every slice's rank,
// trainer_state.json with the global data position, whole.extra_files copied. Written into a
// sibling and renamed into place.
void write_sliced_checkpoint(const WholeTrainingCheckpoint& whole, int64_t slices, const std::filesystem::path& to);

}  // namespace mm
