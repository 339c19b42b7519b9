// The run config of `mmtrain train` (YAML, with `--set key=value` overrides): what to train,
// on which data, how, and where its outputs go. Every key has an explicit default; unknown keys
// are errors (a typo must not silently train something else). See examples/qwen2.5vl/README.md
// for the full key list.
#pragma once
#include <ATen/core/ScalarType.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mm/data/sample_encoder.h"
#include "mm/data/sample_errors.h"
#include "mm/nn/lora.h"
#include "mm/nn/sharding_plan.h"
#include "mm/train/lr_schedule.h"

namespace mm {

// train.precision.
enum class Precision { fp32, bf16 };

struct TrainConfig {
  struct Model {
    // A Hugging Face Qwen2.5-VL directory. With from_scratch it only needs config.json and the
    // tokenizer / preprocessor files; the weights are initialized from init_seed.
    std::filesystem::path path;
    bool from_scratch = false;
    uint64_t init_seed = 0;
    // MoE models: the weight of the load-balancing loss added to each micro-batch's loss
    // (averaged over the step's micro-batches); unset = config.json's router_aux_loss_coef;
    // 0 = no load-balancing loss.
    std::optional<double> router_aux_loss_coef;
    // Models whose checkpoint has a multi-token-prediction head (Qwen3.5's mtp.*): the weight of its
    // loss; unset = 0.1 (Megatron's default); 0 = the head is carried frozen and exported unchanged.
    std::optional<double> mtp_loss_weight;
  } model;

  struct Data {
    std::filesystem::path train;  // .json or .jsonl conversations
    std::filesystem::path root;   // media paths are relative to this (default: train's folder)
    int64_t max_seq_len = 2048;
    Truncation truncation = Truncation::drop;
    bool loss_on_assistant_only = true;  // loss_on: assistant (true) | all
    bool packing = false;
    bool group_by_length = false;
    // Deal each micro-batch's samples to the data-parallel ranks by estimated cost (the sampler's
    // compute balancing) instead of round-robin. Not with packing (rows already fill a token budget).
    bool balance_compute = false;
    bool shuffle = true;
    int num_workers = 2;
    int prefetch = 8;
    OnError on_error = OnError::skip;
    std::optional<int64_t> max_pixels, min_pixels;
    double video_fps = 2.0;
    int64_t video_max_frames = 0;
    // Variables for the model's chat template (apply_chat_template's keyword arguments, e.g.
    // enable_thinking: false): each value read as JSON when it is JSON, else as a string.
    std::map<std::string, std::string> chat_template_kwargs;
  } data;

  struct Train {
    uint64_t seed = 0;
    int64_t micro_batch_size = 1;  // samples per micro-batch (with packing: up to max_seq_len tokens)
    int64_t grad_accum = 1;
    int64_t max_steps = 0;  // optimizer steps; 0 = run `epochs` epochs
    int64_t epochs = 1;
    Precision precision = Precision::fp32;  // bf16: autocast, fp32 master weights
    bool recompute = false;          // recompute each decoder layer and ViT block in backward
    double max_grad_norm = 1.0;      // <= 0: no clipping (the norm is still logged)
    int threads = 0;                 // intra-op threads; 0 = libtorch's default
    std::string device = "auto";     // auto | cpu | cuda | cuda:N (core/device.h)
  } train;

  struct Freeze {
    bool vision_tower = false;  // visual.* except the merger
    bool projector = false;     // visual.merger.* (and visual.deepstack_merger_list.*)
    bool language_model = false;  // model.* and lm_head.*
  } freeze;

  LoraConfig lora;
  bool lora_enabled = false;

  struct Optim {
    double lr = 1e-4;
    double weight_decay = 0.0;
    double beta1 = 0.9, beta2 = 0.999;
    double eps = 1e-8;
    bool fused = true;
  } optim;

  struct Schedule {
    ScheduleKind kind = ScheduleKind::cosine;
    int64_t warmup_steps = 0;
    double warmup_ratio = 0.0;
    double min_lr_ratio = 0.0;
  } schedule;

  struct Output {
    std::filesystem::path dir = "runs/mmtrain";
    int64_t save_every = 0;  // 0 = only at the end
    int keep_last = 2;
    bool tensorboard = true;
    std::string resume = "auto";  // auto (latest checkpoint in dir, if any) | none | a checkpoint path
    int64_t log_every = 1;    // the step line on stderr every N steps (and the last); metrics.jsonl has every step
    bool sample_log = false;  // each rank writes samples/rank-<r>.jsonl: the dataset indices of every step
  } output;

  // Data parallelism when launched as several processes (mmtrain launch, torchrun, Slurm); ignored
  // by a single process. WORLD_SIZE = dp_replicate x dp_shard (ep is carved out of dp_shard).
  struct Parallel {
    int64_t dp_shard = 0;  // ranks each sharded unit is cut over (FSDP); 0 = all; 1 = plain DDP
    // Expert parallelism (MoE models): each of ep ranks holds 1/ep of every MoE layer's experts and
    // tokens travel to them by all-to-all. The ep ranks are taken from the dp_shard ones (ep must
    // divide dp_shard); they still read different data. Experts are FSDP-cut over dp_shard / ep.
    int64_t ep = 1;
    // Context parallelism: cp ranks split each sample's sequence (taken from the dp_shard ones; they
    // read the same data), cp_ulysses of them by Ulysses' all-to-all inside, the cp / cp_ulysses
    // groups by ring attention across (USP); 0 = cp (Ulysses alone), 1 = ring alone.
    int64_t cp = 1;
    int64_t cp_ulysses = 0;
    bool reshard_after_forward = true;
    bool prefetch = true;
    at::ScalarType param_dtype = at::kFloat;   // fp32 | bf16: dtype of gathered parameters (compute)
    at::ScalarType reduce_dtype = at::kFloat;  // fp32 | bf16: dtype gradients are summed in
    bool cpu_offload = false;           // sharded parameters, gradients, optimizer state on the CPU
    ShardPlacement vision = ShardPlacement::shard;    // the vision tower's units
    ShardPlacement language = ShardPlacement::shard;  // the language model's units
    double timeout_s = 300;             // rendezvous and collective timeout
  } parallel;

  struct Eval {
    std::filesystem::path data;  // optional: exact-match evaluation after training
    std::filesystem::path root;
    int64_t max_new_tokens = 32;
    int64_t limit = 0;
  } eval;

  // The YAML as given (after overrides), kept in checkpoints and the run directory.
  YAML::Node source;
};

// The run config's `task` (vlm when absent): the model registry (tasks/model_registry.h) maps it to
// the family that trains it and refuses a name no family trains.
std::string train_task_of(const YAML::Node& root, const std::string& file);

// The sections every trainer shares, read from `root` into `out` (errors name `file` and the
// key; unknown keys are errors). `towers`: the VLM's per-tower placement keys are accepted.
void read_train_section(const YAML::Node& root, const std::string& file, TrainConfig::Train& out);
void read_optim_section(const YAML::Node& root, const std::string& file, TrainConfig::Optim& out);
void read_schedule_section(const YAML::Node& root, const std::string& file, TrainConfig::Schedule& out);
void read_output_section(const YAML::Node& root, const std::string& file, TrainConfig::Output& out);
void read_parallel_section(const YAML::Node& root, const std::string& file, TrainConfig::Parallel& out, bool towers);

// Parses a loaded run config; `file` names it in errors ("cfg.yaml: train.grad_accum: ...").
// Relative paths are taken relative to the current directory, as a user typed them.
TrainConfig parse_train_config(const YAML::Node& root, const std::string& file);

}  // namespace mm
