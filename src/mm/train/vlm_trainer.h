// `mmtrain train` for vision-language models: builds the model (from a Hugging Face directory
// or from scratch), the data pipeline, the optimizer and schedule from a TrainConfig, resumes
// from the latest checkpoint, runs the steps with logging and checkpointing, and ends with an
// HF export of the final weights (LoRA merged) and, if configured, an exact-match evaluation.
#pragma once
#include <filesystem>

#include "mm/train/train_config.h"

namespace mm {

struct TrainSummary {
  int64_t steps = 0;          // optimizer steps done in total (including before a resume)
  double final_loss = 0;
  std::filesystem::path final_model;  // the HF export of the final weights
  double eval_accuracy = -1;          // -1 when no eval was configured
  // The run's latest checkpoint had already reached the configured steps (or epochs): nothing was
  // trained, saved or exported.
  bool already_finished = false;
};

TrainSummary run_training(const TrainConfig& config);

}  // namespace mm
