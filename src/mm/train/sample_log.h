// output.sample_log: every rank records the dataset indices each optimizer step consumed, one
// line per step in <output>/samples/rank-<r>.jsonl
// ({"step": 7, "micro_batches": [{"epoch": 0, "indices": [...]}, ...]}),
// to audit the data order: which samples a run saw, and that a run resumed on another number of
// processes continues the uninterrupted run's order with none skipped or repeated.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "mm/train/step_jsonl.h"

namespace mm {

class SampleLog {
 public:
  SampleLog(const std::filesystem::path& output_dir, int64_t rank, std::optional<int64_t> resume_from_step);
  struct MicroBatch {
    int64_t epoch = 0;
    std::vector<int64_t> indices;  // dataset indices, in the order they were taken
  };
  void record(int64_t step, const std::vector<MicroBatch>& micro_batches);

 private:
  StepJsonl file_;
};

}  // namespace mm
