#include "mm/train/vlm_trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <csignal>
#include <cstdlib>

#include "mm/checkpoint/hf_export.h"
#include "mm/core/error.h"
#include "mm/core/log.h"
#include "mm/core/rng.h"
#include "mm/core/safetensors.h"
#include "mm/data/conversation.h"
#include "mm/data/loader.h"
#include "mm/data/sample_encoder.h"
#include "mm/data/sampler.h"
#include "mm/parallel/device_mesh.h"
#include "mm/parallel/fully_shard.h"
#include "mm/dist/process_group.h"
#include "mm/models/common/weights.h"
#include "mm/models/init_weights.h"
#include "mm/models/vlm_model.h"
#include "mm/tasks/evaluation.h"
#include "mm/tasks/vlm_chat.h"
#include "mm/train/checkpoint_io.h"
#include "mm/train/lora.h"
#include "mm/train/lr_schedule.h"
#include "mm/train/metrics.h"
#include "mm/train/sample_log.h"
#include "mm/train/optimizer.h"
#include "mm/train/recompute.h"
#include "mm/train/trainer_common.h"
#include "mm/checkpoint/resharding.h"
#include "mm/train/vlm_sharding.h"
#include "mm/train/vlm_step.h"

namespace fs = std::filesystem;

namespace mm {

namespace {

using Clock = std::chrono::steady_clock;

Qwen2_5_VLForConditionalGeneration build_model(const TrainConfig& config) {
  const auto& m = config.model;
  MM_CHECK(fs::is_regular_file(m.path / "config.json"), "model.path: ", m.path.string(), " has no config.json");
  if (!m.from_scratch) return Qwen2_5_VLForConditionalGenerationImpl::from_pretrained(m.path, torch::kFloat32);
  Qwen2_5_VLForConditionalGeneration model(Qwen2_5_VLConfig::from_file(m.path / "config.json"));
  init_weights(model, m.init_seed);
  return model;
}

void apply_freezing(Qwen2_5_VLForConditionalGeneration& model, const TrainConfig::Freeze& freeze) {
  for (auto& p : model->named_parameters()) {
    const auto& name = p.key();
    const bool projector = name.rfind("visual.merger.", 0) == 0;
    const bool vision = name.rfind("visual.", 0) == 0 && !projector;
    const bool language = !projector && !vision;
    if ((vision && freeze.vision_tower) || (projector && freeze.projector) || (language && freeze.language_model))
      p.value().set_requires_grad(false);
  }
}

NamedParams trainable_parameters(Qwen2_5_VLForConditionalGeneration& model) {
  NamedParams out;
  for (auto& p : model->named_parameters())
    if (p.value().requires_grad()) out.emplace_back(p.key(), p.value());
  return out;
}

parallel::Placement placement_of(const std::string& name) {
  return name == "replicate" ? parallel::Placement::replicate : parallel::Placement::shard;
}

int64_t bytes_of(const std::vector<at::Tensor>& tensors) {
  int64_t bytes = 0;
  for (const auto& t : tensors)
    if (t.defined()) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  return bytes;
}

class Run {
 public:
  explicit Run(const TrainConfig& config) : config_(config) {}

  TrainSummary execute();

 private:
  void setup_parallel();
  void setup_model();
  void setup_data();
  int64_t estimate_total_steps() const;
  std::unique_ptr<DataLoader> make_loader(const SamplerState& state) const;
  bool next_micro_batch(TrainBatch& out);
  SamplerState data_position() const;  // collective
  void resume_from(const fs::path& dir);
  void save(int64_t step);
  void log_state_bytes(MetricsLogger& metrics) const;
  bool is_main() const { return mesh_->is_main(); }

  const TrainConfig& config_;
  fs::path output_;
  Qwen2_5_VLForConditionalGeneration model_{nullptr};
  Qwen2_5_VLConfig model_config_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ConversationFile> data_;
  std::unique_ptr<SampleEncoder> encoder_;
  std::unique_ptr<Sampler> sampler_;
  std::unique_ptr<DataLoader> loader_;
  std::unique_ptr<AdamW> optimizer_;
  std::vector<at::Tensor> params_;
  SkipTally all_skips() const;  // every rank's skipped records and the run's before a resume; collective
  nlohmann::json skipped_json(const SkipTally& all) const;

  std::optional<dist::Rendezvous> job_;
  std::unique_ptr<parallel::DeviceMesh> mesh_;
  std::unique_ptr<parallel::FullyShardedModel> parallel_;  // when more than one process

  SamplerState data_start_;      // global data position the current loader began at
  nlohmann::json prior_skip_records_;  // records the run before a resume skipped
  nlohmann::json prior_skip_counts_;   // its counts, from a checkpoint that kept no records
  int64_t step_ = 0;
};

void Run::setup_parallel() { setup_data_parallel(config_.parallel, job_, mesh_); }

void Run::setup_model() {
  model_ = build_model(config_);
  model_config_ = model_->config();
  apply_freezing(model_, config_.freeze);
  if (config_.lora_enabled) {
    const int64_t n = apply_lora(*model_, config_.lora);
    log::info("LoRA: ", n, " adapters of rank ", config_.lora.rank);
  }
  const BlockRunner recompute = config_.train.recompute ? recompute_runner() : BlockRunner();
  model_->model->block_runner = recompute;
  model_->visual->block_runner = recompute;
  model_->train();
  int64_t total = 0, trainable = 0;
  for (const auto& p : model_->parameters()) {
    total += p.numel();
    if (p.requires_grad()) trainable += p.numel();
  }
  log::info("model: ", total, " parameters, ", trainable, " trainable");
  MM_CHECK(trainable > 0, "nothing to train: every parameter is frozen (see freeze.* and lora.*)");
  auto named = trainable_parameters(model_);
  if (mesh_->world_size() > 1) {
    auto units = vlm_sharding_units(model_, placement_of(config_.parallel.vision),
                                    placement_of(config_.parallel.language));
    parallel_ = std::make_unique<parallel::FullyShardedModel>(std::move(units), *mesh_, sharding_options(config_.parallel),
                                                          model_->parameters().front().device());
    const auto runner = parallel_->block_runner(recompute);
    model_->model->block_runner = runner;
    model_->visual->block_runner = runner;
    named = parallel_->optimizer_parameters();
  }
  for (auto& [_, p] : named) params_.push_back(p);
  optimizer_ = std::make_unique<AdamW>(named, adamw_config(config_.optim));
}

void Run::setup_data() {
  tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_dir(config_.model.path));
  const auto processor = Qwen2VLProcessor::from_pretrained(config_.model.path);
  SampleEncoderOptions options;
  options.max_seq_len = config_.data.max_seq_len;
  options.truncation = config_.data.truncation;
  options.loss_on_assistant_only = config_.data.loss_on == "assistant";
  options.max_pixels = config_.data.max_pixels;
  options.min_pixels = config_.data.min_pixels;
  options.video_fps = config_.data.video_fps;
  options.video_max_frames = config_.data.video_max_frames;
  encoder_ = std::make_unique<SampleEncoder>(*tokenizer_, processor, model_config_, options);
  data_ = std::make_unique<ConversationFile>(ConversationFile::open(config_.data.train, config_.data.root));
  MM_CHECK(data_->size() > 0, "data.train: ", config_.data.train.string(), " holds no records");

  std::vector<int64_t> lengths(data_->size(), 0);
  if (config_.data.group_by_length) {
    for (size_t i = 0; i < data_->size(); ++i) {
      try {
        lengths[i] = encoder_->estimate_length(data_->get(i));
      } catch (const SampleError&) {
        // Counted when the loader reaches it.
      }
    }
  }
  SamplerOptions sampling;
  sampling.rank = mesh_->rank();
  sampling.world = mesh_->world_size();
  sampling.shuffle = config_.data.shuffle;
  sampling.seed = config_.train.seed;
  sampling.group_by_length = config_.data.group_by_length;
  sampling.group_size = config_.train.micro_batch_size * config_.train.grad_accum * 50;
  sampler_ = std::make_unique<Sampler>(lengths, sampling);
  log::info("data: ", data_->size(), " records in ", config_.data.train.string());
}

std::unique_ptr<DataLoader> Run::make_loader(const SamplerState& state) const {
  LoaderOptions options;
  options.micro_batch_size = config_.train.micro_batch_size;
  options.packing = config_.data.packing;
  options.max_seq_len = config_.data.max_seq_len;
  options.pad_token_id = tokenizer_->pad_token_id().value_or(0);
  options.num_workers = config_.data.num_workers;
  options.prefetch = config_.data.prefetch;
  options.fail_on_error = config_.data.on_error == "fail";
  return std::make_unique<DataLoader>(*data_, *encoder_, *sampler_, options, state);
}

int64_t Run::estimate_total_steps() const {
  if (config_.train.max_steps > 0) return config_.train.max_steps;
  // Epoch mode: one micro-batch per micro_batch_size samples. With packing the count depends on
  // lengths; the record count is then an upper bound and the schedule ends early at worst.
  const int64_t per_epoch = (sampler_->size_per_rank() + config_.train.micro_batch_size - 1) / config_.train.micro_batch_size;
  return std::max<int64_t>(1, config_.train.epochs * per_epoch / config_.train.grad_accum);
}

// The next micro-batch, moving to the next epoch at the end of one; false when the configured
// epochs are done (never in max_steps mode).
bool Run::next_micro_batch(TrainBatch& out) {
  if (!loader_) {
    loader_ = make_loader(data_start_);
    // Records skipped before a resume are known: met again, they are neither counted nor logged.
    if (prior_skip_records_.is_object())
      loader_->skips().merge_records(prior_skip_records_, "trainer_state.json: skipped_records");
  }
  for (int attempts = 0; attempts < 2; ++attempts) {
    if (auto batch = loader_->next()) {
      out = std::move(*batch);
      return true;
    }
    data_start_ = SamplerState{data_start_.epoch + 1, 0, {}};
    loader_->start_epoch(data_start_.epoch);  // also when the run ends: the saved position is then this one
    if (config_.train.max_steps == 0 && data_start_.epoch >= config_.train.epochs) return false;
  }
  fail("data.train: ", config_.data.train.string(), ": an epoch produced no usable batch (see the skipped-sample counts)");
}

// The global data position after the micro-batches every rank has taken: what a resumed run on
// any number of processes continues from.
SamplerState Run::data_position() const {
  const int64_t mine = loader_ ? loader_->taken_after_last_batch() : 0;
  return sampler_->after_taking(data_start_, every_rank_value(*mesh_, mine));
}

// Any checkpoint of this run, saved by any number of processes, onto the current layout.
void Run::resume_from(const fs::path& dir) {
  auto loaded = load_whole_training_checkpoint(dir, mesh_->rank());
  if (parallel_) {
    parallel_->load_whole(loaded.model, dir.string());
    optimizer_->load_state_tensors(local_optimizer_state(*parallel_, loaded.optimizer));
  } else {
    load_weights(*model_, loaded.model, dir.string());
    optimizer_->load_state_tensors(loaded.optimizer);
  }
  restore_rng_state(RngState::from_tensors(loaded.rng));
  const std::string where = (dir / "trainer_state.json").string();
  const JsonView state(loaded.state, where);
  step_ = state.get<int64_t>("step");
  data_start_ = saved_data_position(loaded.state, where);  // the first micro-batch's loader starts there
  if (loaded.state.contains("skipped_records"))
    prior_skip_records_ = loaded.state.at("skipped_records");
  else
    prior_skip_counts_ = loaded.state.at("skipped");
  log::info("resumed from ", dir.string(), " at step ", step_,
            loaded.saved_world_size != mesh_->world_size()
                ? str_cat(" (saved by ", loaded.saved_world_size, " processes, resharded onto ", mesh_->world_size(), ")")
                : std::string());
}

void Run::save(int64_t step) {
  TrainingCheckpoint ckpt;
  ckpt.rng = capture_rng_state().to_tensors();
  const SkipTally skips = all_skips();
  ckpt.state = {{"step", step}, {"data", data_position().to_json()},
                {"world_size", mesh_->world_size()}, {"skipped", skipped_json(skips)},
                {"skipped_records", skips.records_json()},
                {"lora", config_.lora_enabled ? nlohmann::json{{"rank", config_.lora.rank},
                                                             {"alpha", config_.lora.alpha},
                                                             {"dropout", config_.lora.dropout},
                                                             {"target_modules", config_.lora.target_modules},
                                                             {"exclude_prefixes", config_.lora.exclude_prefixes}}
                                              : nlohmann::json()},
                {"run_config", YAML::Dump(config_.source)}};
  // With config.json and these, a checkpoint directory is also what export_hf needs.
  ckpt.extra_files.emplace_back("config.json", config_.model.path / "config.json");
  for (const auto& file : hf_asset_files(config_.model.path)) ckpt.extra_files.emplace_back(file.filename().string(), file);
  fs::path dir;
  if (!parallel_) {
    ckpt.model = named_weights(*model_);
    ckpt.optimizer = optimizer_->state_tensors();
    dir = save_training_checkpoint(output_ / "checkpoints", step, ckpt, config_.output.keep_last);
  } else {
    NamedTensors buffers;
    for (const auto& b : model_->named_buffers()) buffers.emplace_back(b.key(), b.value());
    dir = save_sharded_checkpoint(output_ / "checkpoints", step, std::move(ckpt), buffers, optimizer_->state_tensors(),
                                  *parallel_, *mesh_, config_.output.keep_last);
  }
  log::info("saved checkpoint ", dir.string());
}

// What this rank holds between steps for training: parameters, gradients (as of the last
// backward) and optimizer state, in bytes; under FSDP about 1/N of one process's.
void Run::log_state_bytes(MetricsLogger& metrics) const {
  int64_t parameters = 0, gradients = 0;
  if (parallel_) {
    const auto memory = parallel_->memory();
    parameters = memory.parameter_bytes;
    gradients = memory.gradient_bytes;
  } else {
    parameters = bytes_of(model_->parameters());
    gradients = bytes_of(params_);  // one gradient per trainable parameter, same dtype
  }
  std::vector<at::Tensor> state;
  for (const auto& [_, t] : optimizer_->state_tensors()) state.push_back(t);
  const int64_t optimizer = bytes_of(state);
  log::info("training state on this rank: parameters ", parameters, " B, gradients ", gradients, " B, optimizer ",
            optimizer, " B");
  metrics.add_count("state_bytes.parameters", parameters);
  metrics.add_count("state_bytes.gradients", gradients);
  metrics.add_count("state_bytes.optimizer", optimizer);
}

// Skipped samples by reason over the whole run (all ranks), resumes included. Collective.
SkipTally Run::all_skips() const {
  SkipCounts mine;
  if (loader_) mine = loader_->skips();
  if (prior_skip_records_.is_object()) mine.merge_records(prior_skip_records_, "trainer_state.json: skipped_records");
  return every_rank_skips(*mesh_, mine);
}

nlohmann::json Run::skipped_json(const SkipTally& all) const {
  nlohmann::json counts = all.to_json();
  if (prior_skip_counts_.is_object())  // a checkpoint from before records were kept: its events add up
    for (const auto& [reason, count] : prior_skip_counts_.items())
      counts[reason] = counts.value(reason, int64_t{0}) + count.get<int64_t>();
  return counts;
}

TrainSummary Run::execute() {
  if (config_.train.threads > 0) torch::set_num_threads(config_.train.threads);
  torch::manual_seed(config_.train.seed);
  output_ = config_.output.dir;
  setup_parallel();
  fs::create_directories(output_);

  setup_model();
  setup_data();
  const int64_t total_steps = estimate_total_steps();
  const LrSchedule schedule(lr_schedule_config(config_.schedule, total_steps));

  if (config_.output.resume != "none") {
    std::optional<fs::path> from;
    if (config_.output.resume == "auto")
      from = latest_checkpoint(output_ / "checkpoints");
    else
      from = fs::path(config_.output.resume);
    if (from) resume_from(*from);
  }
  if (step_ > 0 && run_is_finished(config_.train, step_, total_steps, data_start_))
    return finished_run_summary(output_, step_, total_steps, *mesh_);
  if (is_main()) write_file_atomic(output_ / "run_config.yaml", YAML::Dump(config_.source) + "\n");

  MetricsOptions metrics_options;
  metrics_options.output_dir = output_;
  metrics_options.total_steps = total_steps;
  if (step_ > 0) metrics_options.resume_from_step = step_;
  metrics_options.tensorboard = config_.output.tensorboard;
  metrics_options.write_files = is_main();
  metrics_options.log_every = config_.output.log_every;
  MetricsLogger metrics(metrics_options);
  std::optional<SampleLog> sample_log;
  if (config_.output.sample_log)
    sample_log.emplace(output_, mesh_->rank(), step_ > 0 ? std::optional<int64_t>(step_) : std::nullopt);
  StepOptions step_options;
  step_options.data_parallel = parallel_.get();
  step_options.bf16_autocast = config_.train.precision == "bf16";
  step_options.max_grad_norm = config_.train.max_grad_norm;
  log::info("training for ", total_steps, " steps (", config_.train.grad_accum, " x ", config_.train.micro_batch_size,
            config_.data.packing ? " packed rows" : " samples", " per step)");

  // Fault injection for the resume and launcher tests: a real SIGKILL right after the given step
  // is logged, in every process or only in rank MM_FAULT_KILL_RANK.
  const char* kill_env = std::getenv("MM_FAULT_KILL_AT_STEP");
  const char* kill_rank_env = std::getenv("MM_FAULT_KILL_RANK");
  const int64_t kill_at_step =
      kill_env && (!kill_rank_env || std::atoll(kill_rank_env) == mesh_->rank()) ? std::atoll(kill_env) : -1;
  double last_loss = 0;
  bool data_done = false;
  while (step_ < total_steps && !data_done) {
    const auto start = Clock::now();
    std::vector<TrainBatch> micro;
    std::vector<SampleLog::MicroBatch> taken;
    for (int64_t i = 0; i < config_.train.grad_accum; ++i) {
      TrainBatch batch;
      if (!next_micro_batch(batch)) {
        data_done = true;
        break;
      }
      taken.push_back({loader_->epoch(), batch.sample_indices});
      micro.push_back(std::move(batch));
    }
    if (!every_rank_has(*mesh_, micro.size(), config_.train.grad_accum)) {
      if (!micro.empty()) log::info("a rank ran out of data: the last, partial step is not taken");
      break;
    }
    if (micro.empty()) break;
    const double lr = schedule.lr(step_, config_.optim.lr);
    const auto result = train_step(model_, *optimizer_, lr, params_, micro, step_options);
    ++step_;
    last_loss = result.loss;
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    StepMetrics record;
    record.step = step_;
    record.loss = result.loss;
    record.lr = lr;
    record.grad_norm = result.grad_norm;
    record.tokens_per_s = static_cast<double>(result.tokens) / seconds;
    record.samples_per_s = static_cast<double>(result.samples) / seconds;
    record.extra["target_tokens"] = static_cast<double>(result.target_tokens);
    if (parallel_) record.extra["collective_wait_s"] = result.collective_seconds;
    if (result.skipped) log::warn("step ", step_, ": gradient norm is not finite; the update was skipped");
    metrics.log_step(record);
    if (sample_log) sample_log->record(step_, taken);
    if (step_ == kill_at_step) {
      log::warn("MM_FAULT_KILL_AT_STEP=", kill_at_step, ": killing this process (SIGKILL)");
      std::raise(SIGKILL);
    }
    if (config_.output.save_every > 0 && step_ % config_.output.save_every == 0 && step_ < total_steps) save(step_);
  }
  save(step_);
  log_state_bytes(metrics);

  TrainSummary summary;
  summary.steps = step_;
  summary.final_loss = last_loss;
  summary.final_model = output_ / "final";
  if (parallel_) parallel_->gather_all_for_export();  // the whole model on every rank from here
  if (is_main()) {
    export_hf(model_, config_.model.path, summary.final_model);
    log::info("final model (Hugging Face format) in ", summary.final_model.string());
  }

  const auto skipped = skipped_json(all_skips());  // a named value: items() only refers to it
  for (const auto& [reason, count] : skipped.items())
    if (reason == "total" || count.get<int64_t>() > 0) metrics.add_count("skipped_samples." + reason, count.get<int64_t>());
  if (!config_.eval.data.empty() && is_main()) {
    Qwen2_5_VLChat chat(summary.final_model);
    const auto eval_data = ConversationFile::open(config_.eval.data, config_.eval.root);
    EvalOptions eval_options;
    eval_options.max_new_tokens = config_.eval.max_new_tokens;
    eval_options.limit = config_.eval.limit;
    const auto eval = evaluate_exact_match(chat, eval_data, eval_options);
    summary.eval_accuracy = eval.overall.accuracy();
    metrics.add_count("eval_correct", eval.overall.correct);
    metrics.add_count("eval_total", eval.overall.total);
    log::info("eval on ", config_.eval.data.string(), ": exact match ", eval.overall.correct, " / ", eval.overall.total,
              " = ", summary.eval_accuracy);
  }
  metrics.finish();
  mesh_->barrier();  // rank 0 hosts the store: it leaves last
  return summary;
}

}  // namespace

TrainSummary run_training(const TrainConfig& config) { return Run(config).execute(); }

}  // namespace mm
