#include "mm/train/video_trainer.h"

#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cmath>

#include "mm/checkpoint/resharding.h"
#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/core/log.h"
#include "mm/core/rng.h"
#include "mm/core/safetensors.h"
#include "mm/data/video_features.h"
#include "mm/dist/process_group.h"
#include "mm/models/common/weights.h"
#include "mm/models/sora_model.h"
#include "mm/models/sora_model_random.h"
#include "mm/parallel/device_mesh.h"
#include "mm/parallel/fully_shard.h"
#include "mm/train/autocast.h"
#include "mm/train/checkpoint_io.h"
#include "mm/train/grad_clip.h"
#include "mm/train/lr_schedule.h"
#include "mm/train/metrics.h"
#include "mm/train/sample_log.h"
#include "mm/train/optimizer.h"
#include "mm/train/recompute.h"
#include "mm/train/trainer_common.h"
#include "mm/train/video_sharding.h"

namespace fs = std::filesystem;

namespace mm {
namespace {

using Clock = std::chrono::steady_clock;

// One micro-batch as the DiT trains on it.
struct LatentBatch {
  at::Tensor latents;  // [B, z, T', H', W'] float32, normalized
  at::Tensor text;     // [B, L, d]
  int64_t samples = 0;
  int64_t epoch = 0;
  std::vector<int64_t> indices;  // [B] dataset indices
};

// Each sample's noise and timestep come from its own generator keyed by (seed, epoch, index), so
// they do not depend on the batch it lands in, the rank that trains it, the data source (clips or
// extracted features) or a resume.
at::Generator sample_generator(uint64_t seed, int64_t epoch, int64_t index) {
  uint64_t key = seed * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(epoch) << 40) ^ static_cast<uint64_t>(index);
  key ^= key >> 31;  // splitmix64's finalizer: nearby keys give unrelated seeds
  key *= 0xBF58476D1CE4E5B9ull;
  key ^= key >> 27;
  return at::make_generator<at::CPUGeneratorImpl>(key);
}

class VideoRun {
 public:
  explicit VideoRun(const VideoTrainConfig& config) : config_(config) {}
  TrainSummary execute();

 private:
  void setup_parallel();
  void setup_model();
  void setup_data();
  int64_t total_steps() const;
  bool next_micro_batch(LatentBatch& out);
  LatentBatch encode(const TextVideoBatch& batch);
  double train_step(const std::vector<LatentBatch>& micro, double lr, double& grad_norm, int64_t& samples);
  void update_ema();
  void resume_from(const fs::path& dir);
  void save(int64_t step);
  void export_final(const fs::path& out);
  nlohmann::json skipped_json(const SkipTally& at_load) const;
  SkipTally load_skips() const;  // every rank's clips skipped while loading; collective
  bool is_main() const { return mesh_->is_main(); }

  const VideoTrainConfig& config_;
  fs::path output_;
  std::unique_ptr<WanModel> model_;
  WanTransformer3DModel dit_{nullptr};
  std::unique_ptr<AdamW> optimizer_;
  NamedParams named_params_;
  std::vector<at::Tensor> params_;
  NamedTensors ema_;  // fp32 copies of the optimizer's leaves (shards under FSDP)

  std::unique_ptr<TextVideoDataset> clips_;
  std::unique_ptr<TextVideoBatches> clip_batches_;
  std::unique_ptr<VideoFeatures> features_;
  std::unique_ptr<BucketBatchSampler> feature_batches_;
  BucketBatchSampler& batch_sampler();  // the features' or the clips' (one of them is used)
  SamplerState data_position();          // global, after every rank's batches so far; collective

  std::optional<dist::Rendezvous> job_;
  std::unique_ptr<parallel::DeviceMesh> mesh_;
  std::unique_ptr<parallel::FullyShardedModel> parallel_;
  int64_t step_ = 0;
};

void VideoRun::setup_parallel() { setup_data_parallel(config_.parallel, job_, mesh_); }

void VideoRun::setup_model() {
  const auto& m = config_.model;
  WanLoadOptions load;
  load.text_encoder = load.vae = !config_.from_features() && !m.random_frozen;
  load.transformer = !m.from_scratch;
  model_ = WanModel::from_pretrained(m.path, load);
  // Random frozen parts are rebuilt even for features (which they made), to be exported.
  if (m.random_frozen) init_frozen_parts_randomly(*model_, m.init_seed + 1);
  if (m.from_scratch) {
    torch::manual_seed(m.init_seed);  // the modules' default initialization draws from it
    model_->transformer = WanTransformer3DModel(WanTransformerConfig::from_file(m.path / "transformer" / "config.json"));
  }
  MM_CHECK(!model_->config.image_to_video(), "model.path: ", m.path.string(),
           " is an image-to-video pipeline; training supports text-to-video pipelines (WanPipeline)");
  MM_CHECK(!model_->transformer_2, "model.path: ", m.path.string(),
           ": training a two-expert pipeline (transformer_2, Wan2.2 A14B) is not supported yet");
  dit_ = model_->transformer;
  if (model_->vae) model_->vae->eval();
  if (model_->text_encoder) model_->text_encoder->eval();
  dit_->train();
  const BlockRunner recompute = config_.train.recompute ? recompute_runner() : BlockRunner();
  dit_->block_runner = recompute;
  int64_t count = 0;
  for (auto& p : dit_->named_parameters()) {
    named_params_.emplace_back(p.key(), p.value());
    count += p.value().numel();
  }
  log::info("transformer: ", count, " parameters, all trained");
  if (mesh_->world_size() > 1) {
    parallel_ = std::make_unique<parallel::FullyShardedModel>(wan_sharding_units(dit_), *mesh_,
                                                              sharding_options(config_.parallel),
                                                              dit_->parameters().front().device());
    dit_->block_runner = parallel_->block_runner(recompute);
    named_params_ = parallel_->optimizer_parameters();
  }
  for (auto& [_, p] : named_params_) params_.push_back(p);
  optimizer_ = std::make_unique<AdamW>(named_params_, adamw_config(config_.optim));
  if (config_.ema.decay > 0)
    for (const auto& [name, p] : named_params_) ema_.emplace_back("ema." + name, p.detach().to(at::kFloat).clone());
}

void VideoRun::setup_data() {
  BucketSamplerOptions sampling;
  sampling.batch_size = config_.train.micro_batch_size;
  sampling.seed = config_.train.seed;
  sampling.rank = mesh_->rank();
  sampling.world = mesh_->world_size();
  if (config_.from_features()) {
    features_ = std::make_unique<VideoFeatures>(VideoFeatures::open(config_.features.dir));
    MM_CHECK(features_->size() > 0, "features.dir: ", config_.features.dir.string(), " holds no samples");
    MM_CHECK(features_->max_sequence_length() == config_.model.max_sequence_length, "features.dir: extracted with ",
             "max_sequence_length ", features_->max_sequence_length(), ", model.max_sequence_length is ",
             config_.model.max_sequence_length);
    sampling.shuffle = config_.features.shuffle;
    sampling.drop_last = config_.features.drop_last;
    feature_batches_ = std::make_unique<BucketBatchSampler>(features_->bucket_ids(), sampling);
    log::info("data: ", features_->size(), " extracted samples in ", config_.features.dir.string());
    return;
  }
  clips_ = std::make_unique<TextVideoDataset>(TextVideoDataset::open(config_.data));
  MM_CHECK(clips_->size() > 0, "data: no usable clip (see the skipped counts above)");
  sampling.shuffle = config_.data.shuffle;
  sampling.drop_last = config_.data.drop_last;
  clip_batches_ = std::make_unique<TextVideoBatches>(*clips_, BucketBatchSampler(clips_->bucket_ids(), sampling));
  log::info("data: ", clips_->size(), " clips in ", clips_->buckets().size(), " buckets");
}

int64_t VideoRun::total_steps() const {
  if (config_.train.max_steps > 0) return config_.train.max_steps;
  const int64_t batches = features_ ? feature_batches_->batches_per_rank() : clip_batches_->sampler().batches_per_rank();
  return std::max<int64_t>(1, config_.train.epochs * batches / config_.train.grad_accum);
}

// Clips through the frozen VAE (posterior mean, normalized) and umT5, as extraction does.
LatentBatch VideoRun::encode(const TextVideoBatch& batch) {
  torch::NoGradGuard no_grad;
  LatentBatch out;
  const auto vae_dtype = model_->vae->parameters().front().scalar_type();
  out.latents = model_->vae->normalize_latents(model_->vae->encode(batch.video.to(vae_dtype)).mean).to(at::kFloat);
  out.text = model_->encode_prompts(batch.captions, config_.model.max_sequence_length);
  out.samples = out.latents.size(0);
  return out;
}

BucketBatchSampler& VideoRun::batch_sampler() { return features_ ? *feature_batches_ : clip_batches_->sampler(); }

SamplerState VideoRun::data_position() {
  return batch_sampler().after_taking(every_rank_value(*mesh_, batch_sampler().taken()));
}

// The next micro-batch, moving to the next epoch at the end of one; false when the configured
// epochs are done (never in max_steps mode).
bool VideoRun::next_micro_batch(LatentBatch& out) {
  for (int attempts = 0; attempts < 2; ++attempts) {
    if (features_) {
      if (auto indices = feature_batches_->next()) {
        std::vector<at::Tensor> latents, text;
        for (const auto i : *indices) {
          latents.push_back(features_->latents(i));
          text.push_back(features_->text(i));
        }
        out = {at::stack(latents), at::stack(text), static_cast<int64_t>(indices->size()), feature_batches_->epoch(),
               *indices};
        return true;
      }
    } else if (auto batch = clip_batches_->next()) {
      out = encode(*batch);
      out.epoch = clip_batches_->sampler().epoch();
      out.indices = batch->indices;
      return true;
    }
    const int64_t epoch = batch_sampler().epoch() + 1;
    if (config_.train.max_steps == 0 && epoch >= config_.train.epochs) {
      batch_sampler().start_epoch(epoch);  // so that the saved position says the epochs are done
      return false;
    }
    batch_sampler().start_epoch(epoch);
  }
  fail("data: an epoch produced no usable batch (see the skipped-sample counts)");
}

// Forward and backward over the step's micro-batches, clipping and the update. The loss is the
// mean over all samples of the step (of every rank): each micro-batch's per-sample losses are
// summed and divided by the global sample count, so accumulation and data parallelism equal one
// large batch.
double VideoRun::train_step(const std::vector<LatentBatch>& micro, double lr, double& grad_norm, int64_t& samples) {
  samples = 0;
  for (const auto& b : micro) samples += b.samples;
  if (parallel_) {
    auto count = torch::tensor({static_cast<double>(samples)}, torch::kFloat64);
    mesh_->all_reduce_sum(count);
    samples = static_cast<int64_t>(count.item<double>());
  }
  const bool bf16 = config_.train.precision == "bf16";
  double loss_sum = 0;
  for (size_t i = 0; i < micro.size(); ++i) {
    const auto& b = micro[i];
    if (parallel_) {
      parallel_->set_requires_gradient_sync(i + 1 == micro.size());
      parallel_->begin_forward();
    }
    std::vector<at::Tensor> noise, u;
    for (int64_t j = 0; j < b.samples; ++j) {
      auto generator = sample_generator(config_.train.seed, b.epoch, b.indices[static_cast<size_t>(j)]);
      noise.push_back(at::randn(b.latents[j].sizes(), generator, b.latents.options()));
      u.push_back(sample_timestep_density(config_.flow_matching, 1, generator));
    }
    const auto target = make_flow_matching_batch(config_.flow_matching, b.latents, at::stack(noise), at::cat(u));
    at::Tensor loss;
    {
      AutocastGuard autocast(bf16, c10::DeviceType::CPU);
      const auto prediction = dit_->forward(target.noisy, target.timesteps, b.text);
      loss = flow_matching_loss(prediction, target) * static_cast<double>(b.samples);
    }
    (loss / static_cast<double>(samples)).backward();
    if (parallel_) parallel_->finish_backward();
    loss_sum += loss.item<double>();
  }
  if (parallel_) {
    auto total = torch::tensor({loss_sum}, torch::kFloat64);
    mesh_->all_reduce_sum(total);
    loss_sum = total.item<double>();
  }
  grad_norm = parallel_ ? parallel_->clip_grad_norm(config_.train.max_grad_norm)
                        : clip_grad_norm(params_, config_.train.max_grad_norm);
  if (std::isfinite(grad_norm)) {
    optimizer_->step(lr);
    update_ema();
  } else {
    log::warn("step ", step_ + 1, ": gradient norm is not finite; the update was skipped");
  }
  optimizer_->zero_grad();
  return loss_sum / static_cast<double>(samples);
}

void VideoRun::update_ema() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < ema_.size(); ++i)
    ema_[i].second.mul_(config_.ema.decay).add_(params_[i].detach().to(at::kFloat), 1 - config_.ema.decay);
}

void VideoRun::resume_from(const fs::path& dir) {
  auto loaded = load_whole_training_checkpoint(dir, mesh_->rank());
  NamedTensors optimizer, ema;
  for (auto& [name, t] : loaded.optimizer) (name.rfind("ema.", 0) == 0 ? ema : optimizer).emplace_back(name, t);
  if (parallel_) {
    parallel_->load_whole(loaded.model, dir.string());
    optimizer_->load_state_tensors(local_optimizer_state(*parallel_, optimizer));
    ema = local_optimizer_state(*parallel_, ema);
  } else {
    load_weights(*dit_, loaded.model, dir.string());
    optimizer_->load_state_tensors(optimizer);
  }
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
  const SamplerState position = saved_data_position(loaded.state, where);
  if (features_)
    feature_batches_->restore(position);
  else
    clip_batches_ = std::make_unique<TextVideoBatches>(*clips_, clip_batches_->sampler(), position);
  // Clips the run before skipped while loading stay counted once (a checkpoint from before
  // records were kept has none).
  if (clip_batches_ && loaded.state.contains("skipped_records"))
    clip_batches_->skips().merge_records(loaded.state.at("skipped_records"), where + ": skipped_records");
  log::info("resumed from ", dir.string(), " at step ", step_);
}

void VideoRun::save(int64_t step) {
  TrainingCheckpoint ckpt;
  ckpt.rng = capture_rng_state().to_tensors();
  const SkipTally load_skips = this->load_skips();
  ckpt.state = {{"step", step},
                {"data", data_position().to_json()},
                {"world_size", mesh_->world_size()},
                {"skipped", skipped_json(load_skips)},
                {"skipped_records", load_skips.records_json()},
                {"task", "text_to_video"},
                {"run_config", YAML::Dump(config_.source)}};
  ckpt.extra_files.emplace_back("config.json", config_.model.path / "transformer" / "config.json");
  auto optimizer = optimizer_->state_tensors();
  for (const auto& e : ema_) optimizer.push_back(e);
  fs::path dir;
  if (!parallel_) {
    ckpt.model = named_weights(*dit_);
    ckpt.optimizer = std::move(optimizer);
    dir = save_training_checkpoint(output_ / "checkpoints", step, ckpt, config_.output.keep_last);
  } else {
    NamedTensors buffers;
    for (const auto& b : dit_->named_buffers()) buffers.emplace_back(b.key(), b.value());
    dir = save_sharded_checkpoint(output_ / "checkpoints", step, std::move(ckpt), buffers, optimizer, *parallel_,
                                  *mesh_, config_.output.keep_last);
  }
  log::info("saved checkpoint ", dir.string());
}

// `from`'s files under `to`, each hard-linked (no space used on one file system) or else copied:
// unlike a symbolic link, the result survives moving or copying the run, or deleting the source.
void link_or_copy_tree(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  for (const auto& entry : fs::recursive_directory_iterator(from)) {
    const auto target = to / fs::relative(entry.path(), from);
    if (entry.is_directory()) {
      fs::create_directories(target);
      continue;
    }
    std::error_code ec;
    fs::create_hard_link(entry.path(), target, ec);
    if (ec) fs::copy_file(entry.path(), target);
  }
}

// A diffusers pipeline directory: the trained transformer (and its EMA as transformer_ema/, which
// `mmtrain infer t2v --transformer transformer_ema` samples), every other component the source
// pipeline's, hard-linked or copied (the random text encoder and VAE of model.random_frozen are
// written out instead).
void VideoRun::export_final(const fs::path& out) {
  const auto tmp = fs::path(out.string() + ".tmp");
  fs::remove_all(tmp);
  fs::create_directories(tmp / "transformer");
  const auto source = fs::absolute(config_.model.path);
  for (const auto& entry : fs::directory_iterator(source)) {
    const auto name = entry.path().filename();
    if (name == "transformer" || name == "transformer_ema") continue;
    if (config_.model.random_frozen && (name == "vae" || name == "text_encoder")) continue;
    if (entry.is_directory())
      link_or_copy_tree(entry.path(), tmp / name);
    else
      fs::copy_file(entry.path(), tmp / name);
  }
  if (config_.model.random_frozen) {
    for (const char* part : {"vae", "text_encoder"}) {
      fs::create_directories(tmp / part);
      fs::copy_file(source / part / "config.json", tmp / part / "config.json");
    }
    save_safetensors(tmp / "vae" / "diffusion_pytorch_model.safetensors", named_weights(*model_->vae));
    save_safetensors(tmp / "text_encoder" / "model.safetensors", named_weights(*model_->text_encoder));
  }
  fs::copy_file(source / "transformer" / "config.json", tmp / "transformer" / "config.json");
  NamedTensors weights = named_weights(*dit_);
  save_safetensors(tmp / "transformer" / "diffusion_pytorch_model.safetensors", weights);
  if (!ema_.empty()) {
    fs::create_directories(tmp / "transformer_ema");
    fs::copy_file(source / "transformer" / "config.json", tmp / "transformer_ema" / "config.json");
    NamedTensors ema;
    const auto dtype = weights.front().second.scalar_type();
    for (size_t i = 0; i < ema_.size(); ++i) ema.emplace_back(named_params_[i].first, ema_[i].second.to(dtype));
    save_safetensors(tmp / "transformer_ema" / "diffusion_pytorch_model.safetensors", ema);
  }
  fs::remove_all(out);
  fs::rename(tmp, out);
}

SkipTally VideoRun::load_skips() const {
  return every_rank_skips(*mesh_, clip_batches_ ? clip_batches_->skips() : TextVideoSkips());
}

// Records skipped while opening (every rank opens the same data: rank 0's count is the run's)
// and clips skipped while loading (every rank's, each counted once).
nlohmann::json VideoRun::skipped_json(const SkipTally& at_load) const {
  nlohmann::json counts = features_ ? nlohmann::json::object() : clips_->skips().to_json();
  const nlohmann::json loaded = at_load.to_json();  // named: items() only refers to it
  for (const auto& [reason, n] : loaded.items())
    counts[reason] = counts.value(reason, int64_t{0}) + n.get<int64_t>();
  return counts;
}

TrainSummary VideoRun::execute() {
  if (config_.train.threads > 0) torch::set_num_threads(config_.train.threads);
  output_ = config_.output.dir;
  setup_parallel();
  fs::create_directories(output_);
  setup_model();
  setup_data();
  const int64_t steps = total_steps();
  const LrSchedule schedule(lr_schedule_config(config_.schedule, steps));
  if (config_.output.resume != "none") {
    std::optional<fs::path> from = config_.output.resume == "auto" ? latest_checkpoint(output_ / "checkpoints")
                                                                   : std::optional<fs::path>(config_.output.resume);
    if (from) resume_from(*from);
  }
  if (step_ > 0 && run_is_finished(config_.train, step_, steps, batch_sampler().start()))
    return finished_run_summary(output_, step_, steps, *mesh_);
  if (is_main()) write_file_atomic(output_ / "run_config.yaml", YAML::Dump(config_.source) + "\n");
  MetricsOptions metrics_options;
  metrics_options.output_dir = output_;
  metrics_options.total_steps = steps;
  if (step_ > 0) metrics_options.resume_from_step = step_;
  metrics_options.tensorboard = config_.output.tensorboard;
  metrics_options.write_files = is_main();
  metrics_options.log_every = config_.output.log_every;
  MetricsLogger metrics(metrics_options);
  std::optional<SampleLog> sample_log;
  if (config_.output.sample_log)
    sample_log.emplace(output_, mesh_->rank(), step_ > 0 ? std::optional<int64_t>(step_) : std::nullopt);
  log::info("training for ", steps, " steps (", config_.train.grad_accum, " x ", config_.train.micro_batch_size,
            " clips per step and rank)");
  double last_loss = 0;
  bool data_done = false;
  while (step_ < steps && !data_done) {
    const auto start = Clock::now();
    std::vector<LatentBatch> micro;
    for (int64_t i = 0; i < config_.train.grad_accum; ++i) {
      LatentBatch batch;
      if (!next_micro_batch(batch)) {
        data_done = true;
        break;
      }
      micro.push_back(std::move(batch));
    }
    if (!every_rank_has(*mesh_, micro.size(), config_.train.grad_accum)) {
      if (!micro.empty()) log::info("a rank ran out of data: the last, partial step is not taken");
      break;
    }
    if (micro.empty()) break;
    const double lr = schedule.lr(step_, config_.optim.lr);
    double grad_norm = 0;
    int64_t samples = 0;
    int64_t tokens = 0;
    const auto& patch = dit_->config().patch_size;
    for (const auto& b : micro)
      tokens += b.samples * (b.latents.size(2) / patch[0]) * (b.latents.size(3) / patch[1]) * (b.latents.size(4) / patch[2]);
    last_loss = train_step(micro, lr, grad_norm, samples);
    ++step_;
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    StepMetrics record;
    record.step = step_;
    record.loss = last_loss;
    record.lr = lr;
    record.grad_norm = grad_norm;
    record.tokens_per_s = static_cast<double>(tokens * mesh_->world_size()) / seconds;
    record.samples_per_s = static_cast<double>(samples) / seconds;
    if (parallel_) record.extra["collective_wait_s"] = parallel_->take_wait_seconds();
    metrics.log_step(record);
    if (sample_log) {
      std::vector<SampleLog::MicroBatch> taken;
      for (const auto& b : micro) taken.push_back({b.epoch, b.indices});
      sample_log->record(step_, taken);
    }
    if (config_.output.save_every > 0 && step_ % config_.output.save_every == 0 && step_ < steps) save(step_);
  }
  save(step_);
  TrainSummary summary;
  summary.steps = step_;
  summary.final_loss = last_loss;
  summary.final_model = output_ / "final";
  if (parallel_) {
    parallel_->gather_all_for_export();
    if (!ema_.empty()) log::warn("ema: under data parallelism the EMA is kept per shard and not exported");
  }
  if (is_main()) {
    if (parallel_) ema_.clear();
    export_final(summary.final_model);
    log::info("final model (diffusers Wan pipeline) in ", summary.final_model.string());
  }
  const auto skipped = skipped_json(load_skips());
  for (const auto& [reason, count] : skipped.items())
    if (reason == "total" || count.get<int64_t>() > 0) metrics.add_count("skipped_samples." + reason, count.get<int64_t>());
  metrics.finish();
  mesh_->barrier();
  return summary;
}

}  // namespace

TrainSummary run_video_training(const VideoTrainConfig& config) { return VideoRun(config).execute(); }

}  // namespace mm
