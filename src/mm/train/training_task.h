// What the one trainer (trainer.h) asks of a training task: vision-language fine-tuning, text-to-
// video flow matching, and whatever comes next. The trainer owns everything that is the same for
// every task (processes and mesh, sharding, optimizer, schedule, the step, checkpoints and resume,
// metrics, EMA, the finished-run check); a task owns its model, its data and its loss.
#pragma once
#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>
#include <torch/nn/module.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mm/checkpoint/checkpoint_io.h"
#include "mm/data/global_cursor.h"
#include "mm/data/sampler.h"
#include "mm/data/skip_tally.h"
#include "mm/nn/block_runner.h"
#include "mm/parallel/fully_shard.h"
#include "mm/train/train_step.h"

namespace mm {

class MetricsLogger;

// One micro-batch as a task produced it. The trainer reads the counts; only the task looks inside
// (its own subclass).
struct MicroBatch {
  virtual ~MicroBatch() = default;
  int64_t epoch = 0;
  std::vector<int64_t> indices;  // dataset indices of its samples (output.sample_log)
  int64_t loss_units = 0;  // what the loss is a sum over (target tokens, samples): the step divides by their total
  int64_t tokens = 0;      // model input tokens, for tokens/s
  int64_t samples = 0;
  double model_flops = 0;  // trained FLOPs (forward + backward, train/model_flops.h); 0: not counted
};

// A task's training data: micro-batches in one global order that every rank takes its share of,
// resumable on any number of ranks from a global position (global_cursor.h).
class TrainingData {
 public:
  virtual ~TrainingData() = default;
  // This rank's next micro-batch; null at the end of the epoch (then start_epoch).
  virtual std::unique_ptr<MicroBatch> next() = 0;
  virtual void start_epoch(int64_t epoch) = 0;
  // Continues from a global position a checkpoint saved (before the first next()).
  virtual void restore(const SamplerState& position) = 0;
  // Where this rank's current pass began, how many of its positions the batches so far used, and
  // the global position after every rank's count (what a checkpoint saves).
  virtual const SamplerState& start() const = 0;
  virtual int64_t taken() const = 0;
  virtual SamplerState after_taking(const std::vector<int64_t>& taken_per_rank) const = 0;
  // This rank's micro-batches in one epoch (for the step count of epoch mode; an upper bound with packing).
  virtual int64_t batches_per_epoch() const = 0;
  // Records this rank skipped while loading; a resumed run merges the records skipped before.
  virtual SkipTally& skips() = 0;
  // Counts of records skipped while opening the data (the same on every rank), by reason.
  virtual nlohmann::json skipped_at_open() const { return nlohmann::json::object(); }
  // Names the data in the error of an epoch that yields no batch ("data.train: x.jsonl").
  virtual std::string name() const = 0;
};

class TrainingTask {
 public:
  virtual ~TrainingTask() = default;

  // The trained module: its named parameters and buffers are the checkpoint's model tensors, and
  // those that require grad are trained.
  virtual torch::nn::Module& module() = 0;
  // The model's sharding units (its parallel plan for FSDP), over module()'s parameters.
  virtual std::vector<parallel::UnitSpec> sharding_units() = 0;
  // Moves what the task computes with to `device` (train.device), before sharding. The default
  // moves module(); a task that computes with more (frozen encoders) moves that too, or refuses
  // a device it cannot run on yet, naming it.
  virtual void to_device(const c10::Device& device) { module().to(device); }
  // Weights the task left unloaded for sharded loading: parameter name -> a view of the mapped
  // checkpoint (the module's own tensors of those parameters are allocated, never written). The
  // trainer hands them to the sharding, where each rank copies only its own rows, and does not
  // move the module (to_device); empty when the task loaded its model itself. Taken once.
  virtual NamedTensors take_unloaded_weights() { return {}; }
  // Installs the runner every block (decoder layer, ViT block, DiT block) is run through.
  virtual void set_block_runner(const BlockRunner& runner) = 0;

  virtual TrainingData& data() = 0;
  // The loss of one micro-batch summed over its loss_units (0-dim, requires grad). The trainer
  // runs it under autocast when the run is bf16 and scales it by the step's total units
  // (`totals`, over all ranks, for terms averaged over micro-batches).
  virtual at::Tensor loss_sum(const MicroBatch& batch, const StepTotals& totals) = 0;

  // "samples", "packed rows", "clips": what micro_batch_size counts, for the log.
  virtual std::string batch_unit() const = 0;
  // What MicroBatch::loss_units counts, as the metrics key of the step's total ("target_tokens";
  // "samples" is not logged again, samples/s has it).
  virtual std::string loss_units_name() const = 0;
  // Keys the task adds to trainer_state.json ("task", "lora" ...).
  virtual nlohmann::json checkpoint_state() const { return nlohmann::json::object(); }
  // Files copied into every checkpoint under the given name (the model's config, tokenizer ...),
  // so that a checkpoint directory is self-contained for export.
  virtual std::vector<std::pair<std::string, std::filesystem::path>> checkpoint_files() const = 0;
  // Writes the final model (module() holds the whole trained weights) into `out`, in the format
  // the model came in; `ema` are the EMA weights under module()'s names (empty: none). Rank 0.
  virtual void export_final(const std::filesystem::path& out, const NamedTensors& ema) = 0;
  virtual std::string export_format() const = 0;  // "Hugging Face format", "diffusers Wan pipeline"
  // After the export, on rank 0: e.g. an evaluation of the final model. Returns its accuracy, or
  // -1 when there is none; counters go to the run summary.
  virtual double after_export(const std::filesystem::path& final_model, MetricsLogger& metrics) { return -1; }
};

}  // namespace mm
