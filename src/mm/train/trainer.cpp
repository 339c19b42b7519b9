#include "mm/train/trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <map>

#include "mm/checkpoint/resharding.h"
#include "mm/core/device.h"
#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/core/log.h"
#include "mm/core/output_dir.h"
#include "mm/core/rng.h"
#include "mm/nn/weights.h"
#include "mm/parallel/fully_shard.h"
#include "mm/train/lr_schedule.h"
#include "mm/train/metrics.h"
#include "mm/train/model_flops.h"
#include "mm/train/optimizer.h"
#include "mm/train/recompute.h"
#include "mm/train/sample_log.h"
#include "mm/train/train_step.h"
#include "mm/train/trainer_common.h"

namespace fs = std::filesystem;

namespace mm {

namespace {

using Clock = std::chrono::steady_clock;

AfterStepHook& after_step_hook() {
  static AfterStepHook hook;
  return hook;
}

// For a resumed run with nothing left to do: logs that it is done, waits for every rank and returns
// the summary that says so. Nothing is trained, saved or exported. Collective.
TrainSummary finished_run_summary(const fs::path& output_dir, int64_t step, int64_t total_steps,
                                  const parallel::DeviceMesh& mesh) {
  log::info("the run in ", output_dir.string(), " already finished (step ", step, " of ", total_steps,
            "): nothing is trained, saved or exported");
  TrainSummary summary;
  summary.steps = step;
  summary.final_model = output_dir / "final";
  summary.already_finished = true;
  mesh.barrier();
  return summary;
}

int64_t bytes_of(const std::vector<at::Tensor>& tensors) {
  int64_t bytes = 0;
  for (const auto& t : tensors)
    if (t.defined()) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  return bytes;
}

class Trainer {
 public:
  explicit Trainer(const TrainerSettings& settings) : settings_(settings) {}
  TrainSummary run(const TaskFactory& make_task);

 private:
  void setup_model(c10::Device device, const NamedTensors& unloaded_weights);
  int64_t total_steps() const;
  std::unique_ptr<MicroBatch> next_micro_batch();
  SamplerState data_position() const;  // collective
  SkipTally all_skips() const;         // collective
  nlohmann::json skipped_json(const SkipTally& all) const;
  void resume_from(const fs::path& dir);
  void save(int64_t step);
  void update_ema();
  NamedTensors ema_weights() const;
  NamedTensors ema_for_export() const;
  void log_state_bytes(MetricsLogger& metrics) const;
  bool is_main() const { return mesh_->is_main(); }

  const TrainerSettings& settings_;
  fs::path output_;
  std::optional<dist::Rendezvous> job_;
  std::unique_ptr<parallel::DeviceMesh> mesh_;
  std::unique_ptr<TrainingTask> task_;
  // Always, one process included: a mesh of one replicates every unit and issues no collective,
  // so every run takes the same step, checkpoint and export path.
  std::unique_ptr<parallel::FullyShardedModel> parallel_;
  std::optional<parallel::ExpertPlacement> experts_;  // with parallel.ep > 1
  std::unique_ptr<AdamW> optimizer_;
  NamedParams named_params_;       // what the optimizer updates (shards under FSDP)
  std::vector<at::Tensor> params_;
  NamedTensors ema_;               // fp32 copies of named_params_, "ema." + name
  nlohmann::json prior_skip_records_;  // records the run before a resume skipped
  nlohmann::json prior_skip_counts_;   // its counts, from a checkpoint that kept no records
  int64_t step_ = 0;
};

void Trainer::setup_model(c10::Device device, const NamedTensors& unloaded_weights) {
  auto& module = task_->module();
  const BlockRunner recompute = settings_.train.recompute ? recompute_runner() : BlockRunner();
  task_->set_block_runner(recompute);
  int64_t total = 0, trainable = 0;
  for (const auto& p : module.named_parameters()) {
    total += p.value().numel();
    if (p.value().requires_grad()) {
      trainable += p.value().numel();
      named_params_.emplace_back(p.key(), p.value());
    }
  }
  log::info("model: ", total, " parameters, ", trainable, " trainable");
  MM_CHECK(trainable > 0, "nothing to train: every parameter is frozen (see freeze.* and lora.*)");
  if (mesh_->size(parallel::MeshDim::ep) > 1) {
    // Before sharding: the other ranks' experts are released, so that no rank holds them.
    experts_ = parallel::apply_expert_parallel(module, mesh_->group(parallel::MeshDim::ep));
    const int64_t first = experts_->ep_rank * experts_->experts_per_rank;
    log::info("expert parallelism over ep=", experts_->ep_size, ": this rank holds experts [", first, ", ",
              first + experts_->experts_per_rank, ") of each MoE layer, cut over dp_shard=",
              mesh_->size(parallel::MeshDim::dp_shard));
  }
  parallel_ = std::make_unique<parallel::FullyShardedModel>(task_->sharding_units(), *mesh_,
                                                            sharding_options(settings_.parallel), device,
                                                            unloaded_weights, experts_ ? &*experts_ : nullptr);
  if (!unloaded_weights.empty())
    log::info("sharded loading: this rank read ", parallel_->weight_bytes_read(), " B of the checkpoint's ",
              parallel_->weight_bytes_total(), " B");
  task_->set_block_runner(parallel_->block_runner(recompute));
  named_params_ = parallel_->optimizer_parameters();
  for (auto& [_, p] : named_params_) params_.push_back(p);
  optimizer_ = std::make_unique<AdamW>(named_params_, adamw_config(settings_.optim), layer_norm_parameter_names(module));
  if (settings_.ema_decay > 0)
    for (const auto& [name, p] : named_params_) ema_.emplace_back("ema." + name, p.detach().to(at::kFloat).clone());
}

int64_t Trainer::total_steps() const {
  const auto& train = settings_.train;
  if (train.max_steps > 0) return train.max_steps;
  return std::max<int64_t>(1, train.epochs * task_->data().batches_per_epoch() / train.grad_accum);
}

// The next micro-batch, moving to the next epoch at the end of one; null when the configured
// epochs are done (never in max_steps mode).
std::unique_ptr<MicroBatch> Trainer::next_micro_batch() {
  auto& data = task_->data();
  for (int attempts = 0; attempts < 2; ++attempts) {
    if (auto batch = data.next()) return batch;
    const int64_t epoch = data.start().epoch + 1;
    data.start_epoch(epoch);  // also when the run ends: the saved position then says the epochs are done
    if (settings_.train.max_steps == 0 && epoch >= settings_.train.epochs) return nullptr;
  }
  fail(task_->data().name(), ": an epoch produced no usable batch (see the skipped-sample counts)");
}

// The global data position after the micro-batches every rank has taken: what a resumed run on
// any number of processes continues from.
SamplerState Trainer::data_position() const {
  const auto& data = task_->data();
  return data.after_taking(data_rank_values(*mesh_, data.taken()));
}

// Skipped records by reason over the whole run (all ranks), resumes included.
SkipTally Trainer::all_skips() const {
  SkipTally mine = task_->data().skips();
  if (prior_skip_records_.is_object()) mine.merge_records(prior_skip_records_, "trainer_state.json: skipped_records");
  return every_rank_skips(*mesh_, mine);
}

nlohmann::json Trainer::skipped_json(const SkipTally& all) const {
  nlohmann::json counts = task_->data().skipped_at_open();
  const nlohmann::json loaded = all.to_json();  // named: items() only refers to it
  for (const auto& [reason, n] : loaded.items()) counts[reason] = counts.value(reason, int64_t{0}) + n.get<int64_t>();
  if (prior_skip_counts_.is_object())  // a checkpoint from before records were kept: its events add up
    for (const auto& [reason, n] : prior_skip_counts_.items())
      counts[reason] = counts.value(reason, int64_t{0}) + n.get<int64_t>();
  return counts;
}

// Any checkpoint of this run, saved by any number of processes, onto the current layout.
void Trainer::resume_from(const fs::path& dir) {
  auto loaded = load_whole_training_checkpoint(dir, mesh_->rank());
  NamedTensors optimizer, ema;
  for (auto& [name, t] : loaded.optimizer) (name.rfind("ema.", 0) == 0 ? ema : optimizer).emplace_back(name, t);
  parallel_->load_whole(loaded.model, dir.string());
  optimizer_->load_state_tensors(local_optimizer_state(*parallel_, optimizer));
  ema = local_optimizer_state(*parallel_, ema);
  MM_CHECK(ema.size() == ema_.size(), dir.string(), ": has ", ema.size(), " EMA tensors, this run keeps ", ema_.size(),
           " (ema.decay must stay as it was)");
  std::map<std::string, at::Tensor> by_name(ema.begin(), ema.end());
  for (auto& [name, t] : ema_) {
    const auto it = by_name.find(name);
    MM_CHECK(it != by_name.end() && it->second.sizes() == t.sizes(), dir.string(), ": EMA tensor ", name,
             " is missing or mis-shaped");
    t.copy_(it->second);
  }
  restore_rng_state(RngState::from_tensors(loaded.rng));
  const std::string where = (dir / "trainer_state.json").string();
  const JsonView state(loaded.state, where);
  step_ = state.get<int64_t>("step");
  task_->data().restore(saved_data_position(loaded.state, where));
  if (loaded.state.contains("skipped_records")) {
    prior_skip_records_ = loaded.state.at("skipped_records");
    // Records skipped before are known: met again, they are neither counted nor logged.
    task_->data().skips().merge_records(prior_skip_records_, where + ": skipped_records");
  } else if (loaded.state.contains("skipped")) {
    prior_skip_counts_ = loaded.state.at("skipped");
  }
  log::info("resumed from ", dir.string(), " at step ", step_,
            loaded.saved_world_size != mesh_->world_size()
                ? str_cat(" (saved by ", loaded.saved_world_size, " processes, resharded onto ", mesh_->world_size(), ")")
                : std::string());
}

void Trainer::save(int64_t step) {
  TrainingCheckpoint ckpt;
  ckpt.rng = capture_rng_state().to_tensors();
  const SkipTally skips = all_skips();
  ckpt.state = {{"step", step},
                {"data", data_position().to_json()},
                {"world_size", mesh_->world_size()},
                {"skipped", skipped_json(skips)},
                {"skipped_records", skips.records_json()},
                {"run_config", YAML::Dump(settings_.source)}};
  ckpt.state.update(task_->checkpoint_state());
  ckpt.extra_files = task_->checkpoint_files();
  auto optimizer = optimizer_->state_tensors();
  for (const auto& e : ema_) optimizer.push_back(e);
  fs::path dir;
  auto& module = task_->module();
  if (mesh_->world_size() == 1) {
    // One process holds every tensor whole: the checkpoint is whole tensors, without slices or
    // sharding.json (the layout a one-slice sharded checkpoint would describe anyway).
    ckpt.model = named_weights(module);
    ckpt.optimizer = std::move(optimizer);
    dir = save_training_checkpoint(output_ / "checkpoints", step, ckpt, settings_.output.keep_last);
  } else {
    NamedTensors buffers;
    for (const auto& b : module.named_buffers()) buffers.emplace_back(b.key(), b.value());
    dir = save_sharded_checkpoint(output_ / "checkpoints", step, std::move(ckpt), buffers, optimizer, *parallel_,
                                  *mesh_, settings_.output.keep_last);
  }
  log::info("saved checkpoint ", dir.string());
}

void Trainer::update_ema() {
  torch::NoGradGuard no_grad;
  const double decay = settings_.ema_decay;
  for (size_t i = 0; i < ema_.size(); ++i) ema_[i].second.mul_(decay).add_(params_[i].detach().to(at::kFloat), 1 - decay);
}

// The EMA weights under the module's names, in the parameters' dtype. Under data parallelism each
// rank keeps the EMA of its own shards; the checkpoint just saved holds them all, and rank 0 reads
// them back whole from it (the EMA tensors alone).
NamedTensors Trainer::ema_for_export() const {
  if (ema_.empty() || mesh_->world_size() == 1) return ema_weights();
  const auto dir = output_ / "checkpoints" / checkpoint_dir_name(step_);
  std::map<std::string, at::ScalarType> dtypes;
  for (const auto& p : task_->module().named_parameters()) dtypes[p.key()] = p.value().scalar_type();
  NamedTensors out;
  for (auto& [name, t] : load_whole_optimizer_tensors(dir, "ema.")) {
    const auto weight = name.substr(std::string("ema.").size());
    const auto it = dtypes.find(weight);
    MM_CHECK(it != dtypes.end(), dir.string(), ": EMA tensor ", name, " names no parameter of the model");
    out.emplace_back(weight, t.to(it->second));
  }
  MM_CHECK(!out.empty(), dir.string(), ": holds no EMA tensors, though the run keeps an EMA");
  return out;
}

// The EMA weights of a one-process run (whole tensors) under the module's names.
NamedTensors Trainer::ema_weights() const {
  NamedTensors out;
  for (size_t i = 0; i < ema_.size(); ++i)
    out.emplace_back(named_params_[i].first, ema_[i].second.to(named_params_[i].second.scalar_type()));
  return out;
}

// What this rank holds between steps for training: parameters, gradients (as of the last
// backward) and optimizer state, in bytes; under FSDP about 1/N of one process's.
void Trainer::log_state_bytes(MetricsLogger& metrics) const {
  const auto memory = parallel_->memory();
  const int64_t parameters = memory.parameter_bytes, gradients = memory.gradient_bytes;
  std::vector<at::Tensor> state;
  for (const auto& [_, t] : optimizer_->state_tensors()) state.push_back(t);
  const int64_t optimizer = bytes_of(state);
  log::info("training state on this rank: parameters ", parameters, " B, gradients ", gradients, " B, optimizer ",
            optimizer, " B");
  metrics.add_count("state_bytes.parameters", parameters);
  metrics.add_count("state_bytes.gradients", gradients);
  metrics.add_count("state_bytes.optimizer", optimizer);
  if (parallel_->weight_bytes_total() > 0) {
    metrics.add_count("load_bytes.read_by_this_rank", parallel_->weight_bytes_read());
    metrics.add_count("load_bytes.checkpoint", parallel_->weight_bytes_total());
  }
}

TrainSummary Trainer::run(const TaskFactory& make_task) {
  const auto& train = settings_.train;
  if (train.threads > 0) torch::set_num_threads(train.threads);
  torch::manual_seed(train.seed);
  output_ = settings_.output.dir;
  // Before anything is loaded: a GPU asked for and not there fails here.
  const c10::Device device = resolve_device(train.device, "train.device");
  // Device tensors travel over NCCL on a GPU job (Gloo keeps the host scalars), over Gloo on a CPU one.
  setup_data_parallel(settings_.parallel, job_, mesh_, device);
  fs::create_directories(output_);
  task_ = make_task(*mesh_);
  // A model left unloaded for sharded loading stays where it was built: the sharding places each
  // parameter (moving the module would write every tensor the ranks are not meant to hold).
  const NamedTensors unloaded = task_->take_unloaded_weights();
  if (!device.is_cpu() && !unloaded.empty()) {
    torch::NoGradGuard no_grad;
    for (auto& buffer : task_->module().buffers()) buffer.set_data(buffer.to(device));
  }
  // MFU is the model FLOPs rate per device over the device's dense bf16 peak, known for the GPUs
  // model_flops.h lists; elsewhere only the rate is logged.
  double peak_flops = 0;
  if (!device.is_cpu()) {
    if (unloaded.empty()) task_->to_device(device);
    const std::string name = cuda_device_name(device.index());
    peak_flops = peak_bf16_flops(name);
    log::info("training on ", device.str(), " (", name.empty() ? "name unknown" : name, "); ",
              peak_flops > 0 ? str_cat("MFU against its dense bf16 peak of ", peak_flops / 1e12, " TFLOP/s")
                             : std::string("no known bf16 peak: MFU is not reported"));
  }
  setup_model(device, unloaded);
  const int64_t steps = total_steps();
  const LrSchedule schedule(lr_schedule_config(settings_.schedule, steps));

  const auto& resume = settings_.output.resume;
  if (resume != "none") {
    const auto from = resume == "auto" ? latest_checkpoint(output_ / "checkpoints") : std::optional<fs::path>(resume);
    if (from) resume_from(*from);
  }
  if (step_ > 0 && run_is_finished(train, step_, steps, task_->data().start()))
    return finished_run_summary(output_, step_, steps, *mesh_);
  if (is_main()) write_file_atomic(output_ / "run_config.yaml", YAML::Dump(settings_.source) + "\n");

  MetricsOptions metrics_options;
  metrics_options.output_dir = output_;
  metrics_options.total_steps = steps;
  if (step_ > 0) metrics_options.resume_from_step = step_;
  metrics_options.tensorboard = settings_.output.tensorboard;
  metrics_options.write_files = is_main();
  metrics_options.device = device.str();
  metrics_options.log_every = settings_.output.log_every;
  MetricsLogger metrics(metrics_options);
  std::optional<SampleLog> sample_log;
  if (settings_.output.sample_log)
    sample_log.emplace(output_, mesh_->rank(), step_ > 0 ? std::optional<int64_t>(step_) : std::nullopt);
  StepOptions step_options;
  step_options.data_parallel = parallel_.get();
  step_options.bf16_autocast = train.precision == Precision::bf16;
  step_options.max_grad_norm = train.max_grad_norm;
  log::info("training for ", steps, " steps (", train.grad_accum, " x ", train.micro_batch_size, " ",
            task_->batch_unit(), " per step and process)");

  double last_loss = 0;
  bool data_done = false;
  while (step_ < steps && !data_done) {
    const auto start = Clock::now();
    std::vector<std::unique_ptr<MicroBatch>> micro;
    for (int64_t i = 0; i < train.grad_accum; ++i) {
      auto batch = next_micro_batch();
      if (!batch) {
        data_done = true;
        break;
      }
      micro.push_back(std::move(batch));
    }
    if (!every_rank_has(*mesh_, micro.size(), train.grad_accum)) {
      if (!micro.empty()) log::info("a rank ran out of data: the last, partial step is not taken");
      break;
    }
    if (micro.empty()) break;
    const double lr = schedule.lr(step_, settings_.optim.lr);
    std::vector<MicroBatchCounts> counts;
    for (const auto& b : micro) counts.push_back({b->loss_units, b->tokens, b->samples, b->model_flops});
    const auto result = train_step(
        counts, [&](size_t i, const StepTotals& totals) { return task_->loss_sum(*micro[i], totals); }, *optimizer_, lr, params_, step_options,
        task_->loss_units_name().c_str());
    if (!result.skipped) update_ema();
    ++step_;
    last_loss = result.loss;
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    StepMetrics record;
    record.step = step_;
    record.loss = result.loss;
    record.lr = lr;
    record.grad_norm = result.grad_norm;
    record.tokens_per_s = static_cast<double>(result.tokens) / seconds;  // over all ranks
    record.samples_per_s = static_cast<double>(result.samples) / seconds;
    if (task_->loss_units_name() != "samples")
      record.extra[task_->loss_units_name()] = static_cast<double>(result.loss_units);
    if (mesh_->world_size() > 1) record.extra["collective_wait_s"] = result.collective_seconds;
    if (experts_) record.extra["all_to_all_wait_s"] = result.all_to_all_seconds;
    if (result.model_flops > 0) {
      const double per_device = result.model_flops / static_cast<double>(mesh_->world_size()) / seconds;
      record.extra["model_tflops"] = result.model_flops / 1e12;  // the step's work over all ranks
      record.extra["model_tflops_per_s_per_device"] = per_device / 1e12;
      if (peak_flops > 0) record.extra["mfu"] = per_device / peak_flops;
    }
    if (result.skipped) log::warn("step ", step_, ": gradient norm is not finite; the update was skipped");
    metrics.log_step(record);
    if (sample_log) {
      std::vector<SampleLog::MicroBatch> taken;
      for (const auto& b : micro) taken.push_back({b->epoch, b->indices});
      sample_log->record(step_, taken);
    }
    if (after_step_hook()) after_step_hook()(step_, mesh_->rank());
    if (settings_.output.save_every > 0 && step_ % settings_.output.save_every == 0 && step_ < steps) save(step_);
  }
  save(step_);
  log_state_bytes(metrics);

  TrainSummary summary;
  summary.steps = step_;
  summary.final_loss = last_loss;
  summary.final_model = output_ / "final";
  parallel_->gather_all_for_export();  // the whole model on every rank from here
  if (is_main()) {
    task_->export_final(summary.final_model, ema_for_export());
    log::info("final model (", task_->export_format(), ") in ", summary.final_model.string());
  }
  const auto skipped = skipped_json(all_skips());  // a named value: items() only refers to it
  for (const auto& [reason, count] : skipped.items())
    if (reason == "total" || count.get<int64_t>() > 0) metrics.add_count("skipped_samples." + reason, count.get<int64_t>());
  if (is_main()) summary.eval_accuracy = task_->after_export(summary.final_model, metrics);
  metrics.finish();
  mesh_->barrier();  // rank 0 hosts the store: it leaves last
  return summary;
}

}  // namespace

TrainSummary run_trainer(const TrainerSettings& settings, const TaskFactory& make_task) {
  return Trainer(settings).run(make_task);
}

void set_after_step_hook(AfterStepHook hook) { after_step_hook() = std::move(hook); }

}  // namespace mm
