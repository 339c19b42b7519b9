// Vision-language fine-tuning and pretraining as a TrainingTask of the one trainer: a Qwen-VL (Qwen2-VL, Qwen2.5-VL)
// model (from a Hugging Face directory or from scratch), freezing and LoRA, conversations encoded
// by the model's processor and chat template on the loader's worker threads, the summed
// cross-entropy over supervised tokens, the Hugging Face export (LoRA merged) and, when
// configured, an exact-match evaluation of the exported model.
#pragma once
#include <memory>

#include "mm/parallel/device_mesh.h"
#include "mm/train/train_config.h"
#include "mm/train/trainer.h"

namespace mm {

// The sections of `config` the trainer runs by.
TrainerSettings trainer_settings(const TrainConfig& config);

// `config` must outlive the task.
std::unique_ptr<TrainingTask> make_vlm_training_task(const TrainConfig& config, const parallel::DeviceMesh& mesh);

// `mmtrain train` with a vision-language run config.
TrainSummary run_vlm_training(const TrainConfig& config);

}  // namespace mm
