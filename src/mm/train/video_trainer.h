// `mmtrain train` for text-to-video models (task: text_to_video): trains a Wan DiT with the
// flow-matching objective on raw clips (encoded by the frozen VAE and umT5 on the fly) or on
// features from `mmtrain extract`, with gradient accumulation, bf16 autocast, recompute, EMA of
// the weights, data parallelism (FSDP units per DiT block), crash-safe checkpoints and resume,
// and ends with a diffusers pipeline directory of the trained transformer.
#pragma once
#include <filesystem>

#include "mm/train/video_train_config.h"
#include "mm/train/vlm_trainer.h"

namespace mm {

// summary.final_model: a diffusers Wan pipeline directory (the trained transformer, the source's
// other components linked), ready for `mmtrain infer t2v`.
TrainSummary run_video_training(const VideoTrainConfig& config);

}  // namespace mm
