// The one trainer of `mmtrain train`, for every task: sets up the processes and the mesh (one
// process is a mesh of one), builds the task, shards its model by the task's plan when there are
// several processes, and runs the steps with the optimizer and schedule, EMA, checkpoints that
// resume on any number of processes, metrics and the finished-run check; at the end the task
// exports the final model. What differs between tasks is behind TrainingTask (training_task.h).
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>

#include "mm/parallel/device_mesh.h"
#include "mm/train/train_config.h"
#include "mm/train/training_task.h"

namespace mm {

struct TrainSummary {
  int64_t steps = 0;          // optimizer steps done in total (including before a resume)
  double final_loss = 0;
  std::filesystem::path final_model;  // the export of the final weights
  double eval_accuracy = -1;          // -1 when no eval was configured
  // The run's latest checkpoint had already reached the configured steps (or epochs): nothing was
  // trained, saved or exported.
  bool already_finished = false;
};

// The run config's sections every task shares.
struct TrainerSettings {
  TrainConfig::Train train;
  TrainConfig::Optim optim;
  TrainConfig::Schedule schedule;
  TrainConfig::Output output;
  TrainConfig::Parallel parallel;
  double ema_decay = 0;  // 0: no EMA; else ema = decay * ema + (1 - decay) * weights after each update
  YAML::Node source;     // the YAML as given (after overrides): kept in checkpoints and the run directory
};

// The shared sections of a task's run config (every run config has train, optim, schedule, output,
// parallel and the source YAML under these names); a task sets the rest (ema_decay).
template <typename RunConfig>
TrainerSettings shared_trainer_settings(const RunConfig& config) {
  TrainerSettings settings;
  settings.train = config.train;
  settings.optim = config.optim;
  settings.schedule = config.schedule;
  settings.output = config.output;
  settings.parallel = config.parallel;
  settings.source = config.source;
  return settings;
}

// Builds the task once the mesh exists (the data is split by its rank and size).
using TaskFactory = std::function<std::unique_ptr<TrainingTask>(const parallel::DeviceMesh& mesh)>;

TrainSummary run_trainer(const TrainerSettings& settings, const TaskFactory& make_task);

// For tests only (fault injection): called after every logged step with the step and the rank.
// Product code never sets it.
using AfterStepHook = std::function<void(int64_t step, int64_t rank)>;
void set_after_step_hook(AfterStepHook hook);

}  // namespace mm
