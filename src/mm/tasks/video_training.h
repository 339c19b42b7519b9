// Text-to-video training as a TrainingTask of the one trainer: a Wan DiT trained by flow matching
// on raw clips (encoded by the frozen VAE and umT5 on the fly) or on features from
// `mmtrain extract`, each sample's noise and timestep drawn from its own generator, and a
// diffusers pipeline directory of the trained transformer (and its EMA) as the final model.
#pragma once
#include <memory>

#include "mm/parallel/device_mesh.h"
#include "mm/tasks/video_train_config.h"
#include "mm/train/trainer.h"

namespace mm {

TrainerSettings trainer_settings(const VideoTrainConfig& config);

// `config` must outlive the task.
std::unique_ptr<TrainingTask> make_video_training_task(const VideoTrainConfig& config,
                                                       const parallel::DeviceMesh& mesh);

// `mmtrain train` with a text-to-video run config. summary.final_model: a diffusers Wan pipeline
// directory (the trained transformer, the source's other components linked), ready for
// `mmtrain infer t2v`.
TrainSummary run_video_training(const VideoTrainConfig& config);

}  // namespace mm
