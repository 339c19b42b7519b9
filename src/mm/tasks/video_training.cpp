#include "mm/tasks/video_training.h"

#include <torch/torch.h>

#include <utility>

#include <ATen/CPUGeneratorImpl.h>

#include "mm/core/device.h"
#include "mm/core/error.h"
#include "mm/core/host_to_device.h"
#include "mm/core/log.h"
#include "mm/core/seed_mix.h"
#include "mm/data/video_features.h"
#include "mm/models/wan/wan_pipeline.h"
#include "mm/models/wan/wan_pipeline_random.h"
#include "mm/models/wan/wan_sharding.h"
#include "mm/nn/weights.h"
#include "mm/parallel/context_parallel.h"
#include "mm/tasks/video_sampling.h"
#include "mm/tasks/wan_training_export.h"
#include "mm/train/model_flops.h"

namespace fs = std::filesystem;

namespace mm {
namespace {

// One micro-batch as the DiT trains on it.
struct LatentBatch : MicroBatch {
  at::Tensor latents;  // [B, z, T', H', W'] float32, normalized
  at::Tensor text;     // [B, L, d]
  // Image to video (the Wan2.1 layout): each clip's own first frame (and last, for first-last-frame
  // models) as the condition the DiT sees beside the noisy latents.
  at::Tensor condition;     // [B, 4 + z, T', H', W'] float32: frame mask + normalized frame latents
  at::Tensor image_embeds;  // [B, img, image_dim] CLIP tokens ([2B, ...] as (first, last)), or undefined
};

// Each sample's noise and timestep come from its own generator keyed by (seed, epoch, index), so
// they do not depend on the batch it lands in, the rank that trains it, the data source (clips or
// extracted features) or a resume.
at::Generator sample_generator(uint64_t seed, int64_t epoch, int64_t index) {
  return at::make_generator<at::CPUGeneratorImpl>(
      sample_generator_seed(seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index)));
}

// Clips (raw, through the frozen VAE and umT5) or extracted features, by bucketed batches.
class VideoTrainingData : public TrainingData {
 public:
  VideoTrainingData(const VideoTrainConfig& config, WanModel& model, const parallel::DeviceMesh& mesh)
      : config_(config), model_(model), counts_here_(mesh.coordinate(parallel::kContextParallelDims) == 0) {
    BucketSamplerOptions sampling;
    sampling.batch_size = config.train.micro_batch_size;
    sampling.seed = config.train.seed;
    // The ranks of a context-parallel group read the same batches (each trains its part of the tokens).
    sampling.rank = mesh.coordinate(parallel::kDataDims);
    sampling.world = mesh.size(parallel::kDataDims);
    if (config.from_features()) {
      features_ = std::make_unique<VideoFeatures>(VideoFeatures::open(config.features.dir));
      MM_CHECK(features_->size() > 0, "features.dir: ", config.features.dir.string(), " holds no samples");
      MM_CHECK(features_->max_sequence_length() == config.model.max_sequence_length, "features.dir: extracted with ",
               "max_sequence_length ", features_->max_sequence_length(), ", model.max_sequence_length is ",
               config.model.max_sequence_length);
      sampling.shuffle = config.features.shuffle;
      sampling.drop_last = config.features.drop_last;
      feature_batches_ = std::make_unique<BucketBatchSampler>(features_->bucket_ids(), sampling);
      log::info("data: ", features_->size(), " extracted samples in ", config.features.dir.string());
      return;
    }
    clips_ = std::make_unique<TextVideoDataset>(TextVideoDataset::open(config.data));
    MM_CHECK(clips_->size() > 0, "data: no usable clip (see the skipped counts above)");
    sampling.shuffle = config.data.shuffle;
    sampling.drop_last = config.data.drop_last;
    clip_batches_ = std::make_unique<TextVideoBatches>(*clips_, BucketBatchSampler(clips_->bucket_ids(), sampling));
    log::info("data: ", clips_->size(), " clips in ", clips_->buckets().size(), " buckets");
  }

  std::unique_ptr<MicroBatch> next() override {
    auto out = std::make_unique<LatentBatch>();
    if (features_) {
      const auto indices = feature_batches_->next();
      if (!indices) return nullptr;
      std::vector<at::Tensor> latents, text;
      for (const auto i : *indices) {
        latents.push_back(features_->latents(i));
        text.push_back(features_->text(i));
      }
      out->latents = to_compute_device(at::stack(latents));
      out->text = to_compute_device(at::stack(text));
      out->indices = *indices;
    } else {
      auto batch = clip_batches_->next();
      if (!batch) return nullptr;
      encode(*batch, *out);
      out->indices = batch->indices;
    }
    out->epoch = sampler().epoch();
    out->samples = out->latents.size(0);
    out->loss_units = out->samples;  // the loss is a mean over samples
    const auto& patch = model_.transformer->config().patch_size;
    out->tokens = out->samples * (out->latents.size(2) / patch[0]) * (out->latents.size(3) / patch[1]) *
                  (out->latents.size(4) / patch[2]);
    const int64_t image_tokens =
        out->image_embeds.defined() ? out->image_embeds.size(0) / out->samples * out->image_embeds.size(1) : 0;
    out->model_flops = wan_dit_training_flops(model_.transformer->config(), out->samples, out->tokens / out->samples,
                                              out->text.size(1), image_tokens);
    if (!counts_here_) {
      // A context-parallel group counts its batch once (its first rank): loss units, throughput, FLOPs.
      out->loss_units = out->samples = out->tokens = 0;
      out->model_flops = 0;
    }
    return out;
  }
  void start_epoch(int64_t epoch) override {
    if (features_)
      feature_batches_->start_epoch(epoch);
    else
      clip_batches_->start_epoch(epoch);  // restarts its loading too
  }
  void restore(const SamplerState& position) override {
    if (features_)
      feature_batches_->restore(position);
    else
      clip_batches_ = std::make_unique<TextVideoBatches>(*clips_, clip_batches_->sampler(), position);
  }
  const SamplerState& start() const override { return sampler().start(); }
  int64_t taken() const override { return sampler().taken(); }
  SamplerState after_taking(const std::vector<int64_t>& taken_per_rank) const override {
    return sampler().after_taking(taken_per_rank);
  }
  int64_t batches_per_epoch() const override { return sampler().batches_per_rank(); }
  SkipTally& skips() override { return clip_batches_ ? clip_batches_->skips() : no_skips_; }
  // Records skipped while opening: every rank opens the same data, so rank 0's count is the run's.
  nlohmann::json skipped_at_open() const override {
    return features_ ? nlohmann::json::object() : clips_->skips().to_json();
  }
  std::string name() const override {
    return features_ ? "features.dir: " + config_.features.dir.string() : std::string("data");
  }

 private:
  // The features' or the clips' sampler (one of them is used).
  const BucketBatchSampler& sampler() const { return features_ ? *feature_batches_ : clip_batches_->sampler(); }

  // Host tensors to where the transformer trains, without waiting on a GPU.
  at::Tensor to_compute_device(const at::Tensor& host) const {
    return to_device_async(host, model_.transformer->parameters().front().device());
  }

  // Clips through the frozen VAE (posterior mean, normalized) and umT5, as extraction does, where
  // those run.
  void encode(const TextVideoBatch& batch, LatentBatch& out) {
    torch::NoGradGuard no_grad;
    out.latents = model_.vae->encode_normalized(to_compute_device(batch.video)).to(at::kFloat);
    out.text = model_.encode_prompts(batch.captions, config_.model.max_sequence_length);
    if (model_.config.image_to_video()) condition_on_frames(batch, out);
  }

  // What WanImageToVideoPipeline conditions a video on, taken from the clip itself: its first frame
  // (and last, when the transformer has FLF2V's pos_embed_seq_len) through the VAE beside the frame
  // mask, and through CLIP when the transformer has image_dim. The DiT then learns to continue the
  // frame it is given, as DiffSynth-Studio trains Wan2.1-I2V.
  void condition_on_frames(const TextVideoBatch& batch, LatentBatch& out) {
    const auto& tc = model_.transformer->config();
    const bool first_last = tc.pos_embed_seq_len.has_value();
    const int64_t frames = batch.video.size(2);
    const auto first = batch.video.select(2, 0);
    const auto last = first_last ? batch.video.select(2, frames - 1) : at::Tensor();
    out.condition = wan_frame_condition(model_, to_compute_device(first.contiguous()),
                                        first_last ? to_compute_device(last.contiguous()) : at::Tensor(), frames);
    if (!tc.image_dim) return;
    // CLIP takes 8-bit RGB images, as the pipeline's PIL ones: the clip's frames rounded back to them.
    const auto firsts = frames_as_rgb8(first), lasts = first_last ? frames_as_rgb8(last) : at::Tensor();
    std::vector<at::Tensor> images;
    for (int64_t j = 0; j < firsts.size(0); ++j) {
      images.push_back(firsts[j]);
      if (first_last) images.push_back(lasts[j]);  // (first, last) per clip, as the transformer reads them
    }
    out.image_embeds = model_.encode_image(images).to(at::kFloat);
  }

  const VideoTrainConfig& config_;
  WanModel& model_;
  bool counts_here_;  // the first rank of its context-parallel group (or no context parallelism)
  std::unique_ptr<TextVideoDataset> clips_;
  std::unique_ptr<TextVideoBatches> clip_batches_;
  std::unique_ptr<VideoFeatures> features_;
  std::unique_ptr<BucketBatchSampler> feature_batches_;
  SkipCounts no_skips_ = text_video_skip_counts();  // features skip nothing while loading
};

// The run config's task against the pipeline the directory holds, and what image-to-video
// training does not cover yet, named before any data is read.
void check_task_matches_pipeline(const VideoTrainConfig& config, const WanModel& model) {
  const auto& dir = config.model.path.string();
  const bool i2v = model.config.image_to_video();
  MM_CHECK(i2v == (config.task == "image_to_video"), "task: ", config.task, ", but model.path ", dir, " is a ",
           model.config.class_name, " (set task: ", i2v ? "image_to_video" : "text_to_video", ")");
  if (!i2v) return;
  MM_CHECK(!model.config.expand_timesteps, "model.path: ", dir, " is a Wan2.2 TI2V pipeline (expand_timesteps: the ",
           "image latent written over the first latent frame, per-token timesteps): training supports the Wan2.1 ",
           "image-to-video layout (frame mask and image latents as extra input channels) only");
  const auto image_dim = model.transformer->config().image_dim;
  if (!image_dim) return;
  MM_CHECK(model.has_image_encoder(), "model.path: ", dir,
           ": the transformer takes CLIP image tokens (image_dim) but the pipeline has no image_encoder/");
  MM_CHECK(model.image_encoder->config().hidden_size == *image_dim, "model.path: ", dir,
           "/image_encoder/config.json: hidden_size ", model.image_encoder->config().hidden_size,
           " is not the transformer's image_dim ", *image_dim);
}

class VideoTrainingTask : public TrainingTask {
 public:
  VideoTrainingTask(const VideoTrainConfig& config, const parallel::DeviceMesh& mesh) : config_(config) {
    const auto& m = config.model;
    WanLoadOptions load;
    load.text_encoder = load.vae = !config.from_features() && !m.random_frozen;
    load.image_encoder = !m.random_frozen;  // random_frozen builds it (image-to-video), as the VAE
    // Sharded over several ranks, the transformer is built without its weights and each rank
    // copies only its own rows of them (take_unloaded_weights); otherwise it loads whole.
    const bool sharded_load = !m.from_scratch && mesh.size(parallel::kDataShardDims) > 1;
    load.transformer = !m.from_scratch && !sharded_load;
    load.device = resolve_device(config.train.device, "train.device");  // straight onto it
    model_ = WanModel::from_pretrained(m.path, load);
    if (sharded_load) {
      auto [transformer, weights] =
          WanTransformer3DModelImpl::from_pretrained_unloaded(m.path / load.transformer_folder, load.dtype);
      model_->transformer = WanTransformer3DModel(transformer);
      unloaded_ = std::move(weights);
    }
    // Random frozen parts are rebuilt even for features (which they made), to be exported.
    if (m.random_frozen) init_frozen_parts_randomly(*model_, m.init_seed + 1);
    if (m.from_scratch) {
      torch::manual_seed(m.init_seed);  // the modules' default initialization draws from it
      model_->transformer =
          WanTransformer3DModel(WanTransformerConfig::from_file(m.path / "transformer" / "config.json"));
    }
    check_task_matches_pipeline(config, *model_);
    MM_CHECK(!model_->transformer_2, "model.path: ", m.path.string(),
             ": training a two-expert pipeline (transformer_2, Wan2.2 A14B) is not supported yet");
    if (model_->vae) model_->vae->eval();
    if (model_->text_encoder) model_->text_encoder->eval();
    model_->transformer->train();
    set_up_context_parallel(mesh);
    data_ = std::make_unique<VideoTrainingData>(config, *model_, mesh);
  }

  // The transformer and the frozen VAE and umT5 (batches follow them in next()).
  void to_device(const c10::Device& device) override { model_->to(device); }
  torch::nn::Module& module() override { return *model_->transformer; }
  NamedTensors take_unloaded_weights() override { return std::exchange(unloaded_, {}); }
  std::vector<ShardUnit> sharding_units() override { return wan_sharding_units(model_->transformer); }
  void set_block_runner(const BlockRunner& runner) override { model_->transformer->block_runner = runner; }
  TrainingData& data() override { return *data_; }

  // Per-sample flow-matching losses, summed.
  at::Tensor loss_sum(const MicroBatch& micro, const StepTotals& /*totals*/) override {
    const auto& b = static_cast<const LatentBatch&>(micro);
    std::vector<at::Tensor> noise, u;
    for (int64_t j = 0; j < b.latents.size(0); ++j) {  // b.samples is 0 on a cp group's other ranks
      auto generator = sample_generator(config_.train.seed, b.epoch, b.indices[static_cast<size_t>(j)]);
      // Drawn on the CPU from the sample's own generator: the same noise on every device.
      noise.push_back(at::randn(b.latents[j].sizes(), generator, b.latents.options().device(at::kCPU)));
      u.push_back(sample_timestep_density(config_.flow_matching, 1, generator));
    }
    const auto target = make_flow_matching_batch(config_.flow_matching, b.latents,
                                                 to_device_async(at::stack(noise), b.latents.device()), at::cat(u));
    // Image to video: the condition channels after the noisy latents, as the pipeline's input.
    const auto input = b.condition.defined() ? at::cat({target.noisy, b.condition.to(target.noisy.dtype())}, 1)
                                             : target.noisy;
    const auto prediction = model_->transformer->forward(input, target.timesteps, b.text, b.image_embeds);
    // Under context parallelism every rank of the group gets the whole prediction and this same
    // loss; each contributes 1 / cp of it, so that the group's gradients add up to the loss's (the
    // group counts its samples once: VideoTrainingData::next).
    const auto samples = static_cast<double>(b.latents.size(0));
    return flow_matching_loss(prediction, target) * (samples / static_cast<double>(cp_));
  }

  std::string batch_unit() const override { return "clips"; }
  std::string loss_units_name() const override { return "samples"; }
  nlohmann::json checkpoint_state() const override { return {{"task", config_.task}}; }
  std::vector<std::pair<std::string, fs::path>> checkpoint_files() const override {
    return {{"config.json", config_.model.path / "transformer" / "config.json"}};
  }

  // A diffusers pipeline directory (wan_training_export.h).
  void export_final(const fs::path& out, const NamedTensors& ema) override {
    write_wan_training_export(config_.model, config_.model.random_frozen ? model_.get() : nullptr,
                              named_weights(*model_->transformer), ema, out);
  }
  std::string export_format() const override { return "diffusers Wan pipeline"; }

 private:
  // Context parallelism (parallel.cp > 1): the DiT splits each sample's video tokens over the cp
  // ranks (Ulysses inside groups of cp_ulysses, ring across them).
  void set_up_context_parallel(const parallel::DeviceMesh& mesh) {
    cp_ = mesh.size(parallel::kContextParallelDims);
    if (cp_ == 1) return;
    const int64_t ulysses = mesh.size(parallel::MeshDim::cp_ulysses), ring = mesh.size(parallel::MeshDim::cp_ring);
    model_->transformer->context_parallel = parallel::sequence_splitter(parallel::context_parallel_groups(
        mesh, model_->transformer->config().num_attention_heads, "the transformer's"));
    log::info("context parallelism: each sample's video tokens split over cp=", cp_, " ranks (Ulysses ", ulysses,
              " x ring ", ring, ")");
  }

  const VideoTrainConfig& config_;
  std::unique_ptr<WanModel> model_;
  NamedTensors unloaded_;
  std::unique_ptr<VideoTrainingData> data_;
  int64_t cp_ = 1;
};

}  // namespace

TrainerSettings trainer_settings(const VideoTrainConfig& config) {
  TrainerSettings settings = shared_trainer_settings(config);
  settings.ema_decay = config.ema.decay;
  return settings;
}

std::unique_ptr<TrainingTask> make_video_training_task(const VideoTrainConfig& config,
                                                       const parallel::DeviceMesh& mesh) {
  return std::make_unique<VideoTrainingTask>(config, mesh);
}

TrainSummary run_video_training(const VideoTrainConfig& config) {
  return run_trainer(trainer_settings(config),
                     [&config](const parallel::DeviceMesh& mesh) { return make_video_training_task(config, mesh); });
}

}  // namespace mm
