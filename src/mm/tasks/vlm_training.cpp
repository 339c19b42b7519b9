#include "mm/tasks/vlm_training.h"

#include <torch/torch.h>

#include <utility>

#include "mm/models/qwen_vl/qwen_vl_hf_export.h"
#include "mm/core/device.h"
#include "mm/core/error.h"
#include "mm/core/log.h"
#include "mm/data/conversation.h"
#include "mm/data/loader.h"
#include "mm/data/sample_encoder.h"
#include "mm/data/sampler.h"
#include "mm/models/qwen_vl/qwen_vl_init_weights.h"
#include "mm/models/qwen_vl/qwen_vl_model.h"
#include "mm/models/qwen_vl/qwen_vl_sharding.h"
#include "mm/nn/lora.h"
#include "mm/parallel/context_parallel.h"
#include "mm/tasks/evaluation.h"
#include "mm/tasks/vlm_chat.h"
#include "mm/tasks/vlm_step.h"
#include "mm/train/metrics.h"
#include "mm/train/model_flops.h"

namespace fs = std::filesystem;

namespace mm {

namespace {

struct BuiltModel {
  QwenVLForConditionalGeneration model{nullptr};
  NamedTensors unloaded;  // for the sharding to copy each rank's rows from (take_unloaded_weights)
};

// One process (or DDP): loaded whole, straight onto train.device (the trainer's to_device then
// has nothing to move). Sharded over several ranks: built on the CPU without its weights, whose
// checkpoint tensors stay mapped until the sharding copies this rank's rows of them, so no rank
// ever holds the whole model (a 72B model loads on ranks that could not hold it).
BuiltModel build_model(const TrainConfig& config, const parallel::DeviceMesh& mesh) {
  const auto& m = config.model;
  MM_CHECK(fs::is_regular_file(m.path / "config.json"), "model.path: ", m.path.string(), " has no config.json");
  // A multi-token-prediction head is trained (or, at weight 0, carried to the export) wherever the
  // model has one: from scratch when config.json names it, else when the checkpoint holds it.
  if (m.from_scratch) {
    const auto model_config = QwenVLConfig::from_file(m.path / "config.json");
    BuiltModel built{QwenVLForConditionalGeneration(model_config, model_config.text.mtp_num_hidden_layers > 0), {}};
    init_weights(built.model, m.init_seed);
    return built;
  }
  if (mesh.size(parallel::kDataShardDims) > 1) {
    auto unloaded = QwenVLForConditionalGenerationImpl::from_pretrained_unloaded(m.path, torch::kFloat32, /*with_mtp=*/true);
    return {unloaded.model, std::move(unloaded.weights)};
  }
  return {QwenVLForConditionalGenerationImpl::from_pretrained(
              m.path, torch::kFloat32, resolve_device(config.train.device, "train.device"), /*with_mtp=*/true),
          {}};
}

void apply_freezing(QwenVLForConditionalGeneration& model, const TrainConfig::Freeze& freeze) {
  for (auto& p : model->named_parameters()) {
    const auto& name = p.key();
    // The projector: the merger into the text width, and Qwen3-VL's DeepStack mergers beside it.
    const bool projector =
        name.rfind("visual.merger.", 0) == 0 || name.rfind("visual.deepstack_merger_list.", 0) == 0;
    const bool vision = name.rfind("visual.", 0) == 0 && !projector;
    const bool language = !projector && !vision;
    if ((vision && freeze.vision_tower) || (projector && freeze.projector) || (language && freeze.language_model))
      p.value().set_requires_grad(false);
  }
}

struct VlmMicroBatch : MicroBatch {
  TrainBatch batch;
};

// Conversations through the threaded loader, in the sampler's global order.
class VlmTrainingData : public TrainingData {
 public:
  // mtp_depths: the multi-token-prediction depths the loss runs (0: none), for the FLOPs.
  VlmTrainingData(const TrainConfig& config, const QwenVLConfig& model_config, const parallel::DeviceMesh& mesh,
                  int64_t mtp_depths)
      : config_(config),
        model_config_(model_config),
        mtp_depths_(mtp_depths),
        counts_here_(mesh.coordinate(parallel::kContextParallelDims) == 0) {
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_dir(config.model.path));
    const auto processor = Qwen2VLProcessor::from_pretrained(config.model.path);
    SampleEncoderOptions options;
    options.max_seq_len = config.data.max_seq_len;
    options.truncation = config.data.truncation;
    options.loss_on_assistant_only = config.data.loss_on_assistant_only;
    options.max_pixels = config.data.max_pixels;
    options.min_pixels = config.data.min_pixels;
    options.video_fps = config.data.video_fps;
    options.video_max_frames = config.data.video_max_frames;
    auto chat_template = ModelChatTemplate::from_dir(config.model.path);
    nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
    for (const auto& [name, value] : config.data.chat_template_kwargs) kwargs[name] = chat_kwarg_value(value);
    chat_template.set_kwargs(kwargs);
    if (chat_template.is_builtin())
      log::warn("model.path: ", config.model.path.string(), " ships no chat template (chat_template.jinja, ",
                "chat_template.json or tokenizer_config.json's chat_template): conversations are rendered with ",
                "the built-in Qwen2-VL template");
    else
      log::info("chat template: ", chat_template.source());
    encoder_ = std::make_unique<SampleEncoder>(*tokenizer_, processor, model_config, options, std::move(chat_template));
    file_ = std::make_unique<ConversationFile>(ConversationFile::open(config.data.train, config.data.root));
    MM_CHECK(file_->size() > 0, "data.train: ", config.data.train.string(), " holds no records");
    std::vector<int64_t> lengths(file_->size(), 0);
    if (config.data.group_by_length || config.data.balance_compute) {
      for (size_t i = 0; i < file_->size(); ++i) {
        try {
          lengths[i] = encoder_->estimate_length(file_->get(i));
        } catch (const SampleError&) {
          // Counted when the loader reaches it.
        }
      }
    }
    SamplerOptions sampling;
    // The ranks of a context-parallel group read the same batches (each trains its part of the tokens).
    sampling.rank = mesh.coordinate(parallel::kDataDims);
    sampling.world = mesh.size(parallel::kDataDims);
    sampling.shuffle = config.data.shuffle;
    sampling.seed = config.train.seed;
    sampling.group_by_length = config.data.group_by_length;
    sampling.group_size = config.train.micro_batch_size * config.train.grad_accum * 50;
    if (config.data.balance_compute && sampling.world > 1) {
      // A sample's cost: the training FLOPs of the decoder over its estimated length (vision
      // tokens at max_pixels included): linear layers per token plus attention by its square.
      for (const int64_t length : lengths)
        sampling.costs.push_back(qwen_decoder_training_flops(model_config.text, {std::max<int64_t>(length, 1)}, length));
      sampling.balance_block = config.train.micro_batch_size;
      log::info("compute balancing: each micro-batch's ", sampling.world * sampling.balance_block,
                " samples dealt to the ", sampling.world, " data-parallel ranks by estimated FLOPs");
    }
    sampler_ = std::make_unique<Sampler>(lengths, sampling);
    log::info("data: ", file_->size(), " records in ", config.data.train.string());
  }

  std::unique_ptr<MicroBatch> next() override {
    auto batch = loader().next();
    if (!batch) return nullptr;
    auto out = std::make_unique<VlmMicroBatch>();
    out->epoch = loader_->epoch();
    out->indices = batch->sample_indices;
    out->loss_units = batch->num_target_tokens;
    out->tokens = batch->num_tokens;
    out->samples = static_cast<int64_t>(batch->sample_indices.size());
    out->model_flops = vlm_batch_training_flops(model_config_, *batch, mtp_depths_);
    if (!counts_here_) {
      // A context-parallel group counts its batch once (its first rank): loss units, throughput, FLOPs.
      out->loss_units = out->tokens = out->samples = 0;
      out->model_flops = 0;
    }
    out->batch = std::move(*batch);
    return out;
  }
  void start_epoch(int64_t epoch) override {
    start_ = SamplerState{epoch, 0, {}};
    loader().start_epoch(epoch);
  }
  void restore(const SamplerState& position) override {
    MM_CHECK(!loader_, "the data position is restored before the first batch");
    start_ = position;
  }
  const SamplerState& start() const override { return start_; }
  int64_t taken() const override { return loader_ ? loader_->taken_after_last_batch() : 0; }
  SamplerState after_taking(const std::vector<int64_t>& taken_per_rank) const override {
    return sampler_->after_taking(start_, taken_per_rank);
  }
  int64_t batches_per_epoch() const override {
    // One micro-batch per micro_batch_size samples. With packing the count depends on lengths;
    // the record count is then an upper bound and the schedule ends early at worst.
    return (sampler_->size_per_rank() + config_.train.micro_batch_size - 1) / config_.train.micro_batch_size;
  }
  SkipTally& skips() override { return loader_ ? loader_->skips() : before_loading_; }
  std::string name() const override { return "data.train: " + config_.data.train.string(); }

  const Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  // The loader starts its workers when first needed: after a resume restored the position.
  DataLoader& loader() {
    if (!loader_) {
      LoaderOptions options;
      options.micro_batch_size = config_.train.micro_batch_size;
      options.packing = config_.data.packing;
      options.max_seq_len = config_.data.max_seq_len;
      options.pad_token_id = tokenizer_->pad_token_id().value_or(0);
      options.num_workers = config_.data.num_workers;
      options.prefetch = config_.data.prefetch;
      options.fail_on_error = config_.data.on_error == OnError::fail;
      loader_ = std::make_unique<DataLoader>(*file_, *encoder_, *sampler_, options, start_);
      // Records known to be bad from before a resume are neither counted again nor logged.
      loader_->skips().merge_records(before_loading_.records_json(), "skipped records before the loader");
    }
    return *loader_;
  }

  const TrainConfig& config_;
  QwenVLConfig model_config_;  // for the FLOPs of each micro-batch
  int64_t mtp_depths_ = 0;
  bool counts_here_;  // the first rank of its context-parallel group (or no context parallelism)
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<SampleEncoder> encoder_;
  std::unique_ptr<ConversationFile> file_;
  std::unique_ptr<Sampler> sampler_;
  std::unique_ptr<DataLoader> loader_;
  SkipCounts before_loading_;  // what a resume merges before the loader exists
  SamplerState start_;         // global data position the current pass began at
};

class VlmTrainingTask : public TrainingTask {
 public:
  VlmTrainingTask(const TrainConfig& config, const parallel::DeviceMesh& mesh)
      : config_(config) {
    auto built = build_model(config, mesh);
    model_ = built.model;
    unloaded_ = std::move(built.unloaded);
    apply_freezing(model_, config.freeze);
    if (config.lora_enabled) {
      const int64_t n = apply_lora(*model_, config.lora);
      log::info("LoRA: ", n, " adapters of rank ", config.lora.rank);
    }
    model_->train();
    loss_weights_.router_aux_loss_coef =
        vlm_router_aux_loss_coef(model_->config(), config.model.router_aux_loss_coef);
    if (model_->config().text.moe.num_experts > 0)
      log::info("MoE load-balancing loss weight: ", loss_weights_.router_aux_loss_coef,
                config.model.router_aux_loss_coef ? " (model.router_aux_loss_coef)" : " (config.json)");
    loss_weights_.mtp_loss_weight = vlm_mtp_loss_weight(*model_, config.model.mtp_loss_weight);
    if (model_->mtp) {
      log::info("multi-token prediction: ", model_->mtp->depths(), " depth(s), loss weight ",
                loss_weights_.mtp_loss_weight, config.model.mtp_loss_weight ? " (model.mtp_loss_weight)" : " (default)",
                loss_weights_.mtp_loss_weight == 0 ? "; the head is frozen and exported as loaded" : "");
      // Without a loss the head gets no gradient; frozen, no optimizer step (weight decay) moves it.
      if (loss_weights_.mtp_loss_weight == 0)
        for (auto& p : model_->mtp->parameters()) p.set_requires_grad(false);
    }
    set_up_context_parallel(mesh);
    data_ = std::make_unique<VlmTrainingData>(config, model_->config(), mesh,
                                              loss_weights_.mtp_loss_weight > 0 ? model_->mtp->depths() : 0);
  }

  torch::nn::Module& module() override { return *model_; }
  NamedTensors take_unloaded_weights() override { return std::exchange(unloaded_, {}); }
  std::vector<ShardUnit> sharding_units() override {
    return qwen_vl_sharding_units(model_, config_.parallel.vision, config_.parallel.language);
  }
  void set_block_runner(const BlockRunner& runner) override {
    model_->model->block_runner = runner;
    model_->visual->block_runner = runner;
    if (model_->mtp) model_->mtp->block_runner = runner;
  }
  TrainingData& data() override { return *data_; }
  at::Tensor loss_sum(const MicroBatch& batch, const StepTotals& totals) override {
    return vlm_loss_sum(model_, static_cast<const VlmMicroBatch&>(batch).batch, loss_weights_, totals);
  }
  std::string batch_unit() const override { return config_.data.packing ? "packed rows" : "samples"; }
  std::string loss_units_name() const override { return "target_tokens"; }
  nlohmann::json checkpoint_state() const override {
    const auto& lora = config_.lora;
    return {{"lora", config_.lora_enabled ? nlohmann::json{{"rank", lora.rank},
                                                           {"alpha", lora.alpha},
                                                           {"dropout", lora.dropout},
                                                           {"target_modules", lora.target_modules},
                                                           {"exclude_prefixes", lora.exclude_prefixes}}
                                          : nlohmann::json()}};
  }
  std::vector<std::pair<std::string, fs::path>> checkpoint_files() const override {
    // With config.json and the assets, a checkpoint directory is also what export_hf needs.
    std::vector<std::pair<std::string, fs::path>> files{{"config.json", config_.model.path / "config.json"}};
    for (const auto& file : hf_asset_files(config_.model.path)) files.emplace_back(file.filename().string(), file);
    return files;
  }
  void export_final(const fs::path& out, const NamedTensors& ema) override {
    export_hf(model_, config_.model.path, out);
  }
  std::string export_format() const override { return "Hugging Face format"; }
  double after_export(const fs::path& final_model, MetricsLogger& metrics) override {
    if (config_.eval.data.empty()) return -1;
    QwenVLChat chat(final_model);
    const auto eval_data = ConversationFile::open(config_.eval.data, config_.eval.root);
    EvalOptions options;
    options.max_new_tokens = config_.eval.max_new_tokens;
    options.limit = config_.eval.limit;
    const auto eval = evaluate_exact_match(chat, eval_data, options);
    metrics.add_count("eval_correct", eval.overall.correct);
    metrics.add_count("eval_total", eval.overall.total);
    log::info("eval on ", config_.eval.data.string(), ": exact match ", eval.overall.correct, " / ", eval.overall.total,
              " = ", eval.overall.accuracy());
    return eval.overall.accuracy();
  }

 private:
  // Context parallelism (parallel.cp > 1): each sample's sequence split over the cp ranks (causal
  // zig-zag per document; Ulysses inside groups of cp_ulysses, ring across them), and its images'
  // and video frames' vision encoding dealt over them.
  void set_up_context_parallel(const parallel::DeviceMesh& mesh) {
    const int64_t cp = mesh.size(parallel::kContextParallelDims);
    if (cp == 1) return;
    const int64_t ulysses = mesh.size(parallel::MeshDim::cp_ulysses), ring = mesh.size(parallel::MeshDim::cp_ring);
    const auto& text = model_->config().text;
    const auto groups = parallel::context_parallel_groups(mesh, text.num_attention_heads, "the decoder's");
    // Gated DeltaNet layers (Qwen3.5's hybrid decoder) run head-parallel over all cp ranks: their
    // key or value heads must split evenly.
    for (int64_t i = 0; i < text.num_hidden_layers; ++i)
      MM_CHECK(!text.is_linear_attention_layer(i) || text.linear.num_key_heads % cp == 0 ||
                   text.linear.num_value_heads % cp == 0,
               "parallel.cp=", cp, ": decoder layer ", i, " of ", config_.model.path.string(),
               " is a Gated DeltaNet, which context parallelism splits by heads over all cp ranks, but neither its "
               "linear_num_key_heads (", text.linear.num_key_heads, ") nor its linear_num_value_heads (",
               text.linear.num_value_heads, ") is a multiple of ", cp);
    model_->context_parallel = parallel::sequence_splitter(groups);
    model_->vision_items = parallel::item_splitter(groups);
    log::info("context parallelism: each sample's tokens split over cp=", cp, " ranks (Ulysses ", ulysses, " x ring ",
              ring, "), its images and video frames encoded across them");
  }

  const TrainConfig& config_;
  QwenVLForConditionalGeneration model_{nullptr};
  NamedTensors unloaded_;
  std::unique_ptr<VlmTrainingData> data_;
  VlmLossWeights loss_weights_;  // 0: a dense model / no MTP head, or the term turned off
};

}  // namespace

TrainerSettings trainer_settings(const TrainConfig& config) { return shared_trainer_settings(config); }

std::unique_ptr<TrainingTask> make_vlm_training_task(const TrainConfig& config, const parallel::DeviceMesh& mesh) {
  return std::make_unique<VlmTrainingTask>(config, mesh);
}

TrainSummary run_vlm_training(const TrainConfig& config) {
  return run_trainer(trainer_settings(config),
                     [&config](const parallel::DeviceMesh& mesh) { return make_vlm_training_task(config, mesh); });
}

}  // namespace mm
