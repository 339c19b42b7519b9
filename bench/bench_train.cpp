// Training-step throughput and memory: forward + backward + clipping + fused AdamW on the
// benchmark's small Qwen2.5-VL (or its Qwen3-VL, Qwen3-VL-MoE, Qwen3.5 siblings), for micro-batches of image
// conversations. The reference side, tests/reference/bench_train.py, runs the same shapes through a plain PyTorch
// loop over transformers. Usage: bench_train [--packed] MODEL_DIR THREADS STEPS BATCH [DP_SHARD [EP]] -> one JSON line
// on stdout. Started as several ranks (mmtrain launch --program bench_train -- ...), every rank
// trains BATCH samples of its own per step under data parallelism (DP_SHARD 1: replicated, 0:
// sharded over all ranks; EP > 1: a MoE model's experts spread over EP of the sharding ranks,
// as `parallel.ep` in a run config); rank 0 prints tokens/s over all ranks and the step time split into
// waiting on FSDP's collectives, in the dispatch's all-to-alls, and the rest (computation, with
// the communication it overlaps).
// Sample k: <bos> + 20 + k % 7 text tokens, a 16 x 16-patch image (64 merged tokens), 30 + k % 5
// prompt tokens, 12 + k % 3 answer tokens (the targets), right-padded into one micro-batch, or with
// --packed one row of the samples back to back (attention, and Qwen3.5's DeltaNet state, restarting
// at each; no padding computed).
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <optional>
#include <string>
#include <variant>

#include "mm/parallel/device_mesh.h"
#include "mm/parallel/expert_parallel.h"
#include "mm/parallel/fully_shard.h"
#include "mm/dist/process_group.h"
#include "mm/models/qwen_vl/qwen_vl_model.h"
#include "mm/train/optimizer.h"
#include "mm/models/qwen_vl/qwen_vl_sharding.h"
#include "mm/tasks/vlm_step.h"
#include "bench_memory.h"

using mm::bench::peak_rss_mb;

namespace {

mm::TrainSample make_sample(const mm::QwenVLConfig& config, int64_t k) {
  const int64_t grid_h = 16, grid_w = 16, merged = grid_h * grid_w / 4;
  std::vector<int64_t> ids = {1};
  auto text = [&](int64_t n) {
    for (int64_t i = 0; i < n; ++i) ids.push_back(100 + (k * 31 + i * 7) % 200);
  };
  text(20 + k % 7);
  ids.push_back(config.vision_start_token_id);
  for (int64_t i = 0; i < merged; ++i) ids.push_back(config.image_token_id);
  ids.push_back(config.vision_end_token_id);
  text(30 + k % 5);
  const auto prompt = static_cast<int64_t>(ids.size());
  text(12 + k % 3);
  mm::TrainSample s;
  s.index = k;
  s.input_ids = torch::tensor(ids, torch::kInt64);
  s.targets = torch::full_like(s.input_ids, -100);
  for (int64_t p = prompt - 1; p + 1 < s.input_ids.size(0); ++p) s.targets[p] = s.input_ids[p + 1];
  s.image_grid_thw = torch::tensor({int64_t{1}, grid_h, grid_w}, torch::kInt64).view({1, 3});
  const int64_t patch = std::visit([](const auto& v) { return v.patch_size; }, config.vision);
  s.pixel_values = torch::randn({grid_h * grid_w, 3 * 2 * patch * patch});
  mm::QwenVLInputs inputs;
  inputs.input_ids = s.input_ids.unsqueeze(0);
  inputs.image_grid_thw = s.image_grid_thw;
  s.position_ids = mm::qwen_vl_rope_index(config, inputs).position_ids.squeeze(1);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const bool packed = argc > 1 && std::string(argv[1]) == "--packed";
  if (packed) --argc, ++argv;
  if (argc < 5 || argc > 7) {
    std::cerr << "usage: bench_train [--packed] MODEL_DIR THREADS STEPS BATCH [DP_SHARD [EP]]\n";
    return 2;
  }
  torch::set_num_threads(std::stoi(argv[2]));
  const int steps = std::stoi(argv[3]);
  const int64_t batch = std::stoll(argv[4]);
  const auto env = mm::dist::DistEnv::from_env();
  const double rss_before_model_mb = peak_rss_mb();
  auto model = mm::QwenVLForConditionalGenerationImpl::from_pretrained(argv[1]);
  model->train();
  mm::NamedParams named;
  for (auto& p : model->named_parameters()) named.emplace_back(p.key(), p.value());

  std::optional<mm::dist::Rendezvous> job;
  std::unique_ptr<mm::parallel::DeviceMesh> mesh;
  std::unique_ptr<mm::parallel::FullyShardedModel> parallel;
  std::optional<mm::parallel::ExpertPlacement> experts;
  int64_t shard = 1, ep = 1;
  if (env.distributed()) {
    using mm::parallel::MeshDim;
    shard = argc >= 6 && std::stoll(argv[5]) > 0 ? std::stoll(argv[5]) : env.world_size;
    ep = argc == 7 ? std::stoll(argv[6]) : 1;
    job = mm::dist::rendezvous(env);
    // The trainer's mesh (train/trainer_common.cpp): ep carved out of dp_shard.
    mm::parallel::DeviceMesh::Dims dims{{MeshDim::dp_replicate, env.world_size / shard}, {MeshDim::dp_shard, shard / ep}};
    std::vector<std::vector<MeshDim>> flattened;
    if (ep > 1) {
      dims.emplace_back(MeshDim::ep, ep);
      if (shard / ep > 1) flattened.push_back(mm::parallel::kDataShardDims);
    }
    mesh = std::make_unique<mm::parallel::DeviceMesh>(*job, dims, torch::Device(torch::kCPU), false, flattened);
    if (ep > 1) experts = mm::parallel::apply_expert_parallel(*model, mesh->group(MeshDim::ep));
    parallel = std::make_unique<mm::parallel::FullyShardedModel>(
        mm::qwen_vl_sharding_units(model, mm::parallel::Placement::shard, mm::parallel::Placement::shard), *mesh,
        mm::parallel::ShardingOptions{}, torch::Device(torch::kCPU), mm::parallel::NamedTensorList{},
        experts ? &*experts : nullptr);
    auto runner = parallel->block_runner(nullptr);
    model->model->block_runner = runner;
    model->visual->block_runner = runner;
    named = parallel->optimizer_parameters();
  }
  std::vector<torch::Tensor> params;
  for (auto& [_, p] : named) params.push_back(p);
  mm::AdamWConfig optim;
  optim.lr = 1e-5;
  optim.weight_decay = 0.01;
  mm::AdamW optimizer(named, optim);
  torch::manual_seed(env.rank);
  std::vector<mm::TrainSample> samples;
  for (int64_t k = 0; k < batch; ++k) samples.push_back(make_sample(model->config(), env.rank * batch + k));
  const std::vector<mm::TrainBatch> micro = {packed ? mm::collate_packed(samples) : mm::collate_padded(samples, 0)};
  mm::StepOptions options;
  options.max_grad_norm = 1.0;
  options.data_parallel = parallel.get();

  mm::train_step(model, optimizer, optim.lr, params, micro, options);  // warm-up
  std::vector<double> seconds, waits, exchanges;
  int64_t tokens = 0;
  for (int i = 0; i < steps; ++i) {
    if (mesh) mesh->barrier();  // every rank starts the step together
    const auto start = std::chrono::steady_clock::now();
    const auto result = mm::train_step(model, optimizer, optim.lr, params, micro, options);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    waits.push_back(result.collective_seconds);
    exchanges.push_back(result.all_to_all_seconds);
    tokens = result.tokens;
  }
  std::sort(seconds.begin(), seconds.end());
  std::sort(waits.begin(), waits.end());
  std::sort(exchanges.begin(), exchanges.end());
  const double median = seconds[seconds.size() / 2];
  if (env.rank != 0) return 0;
  std::cout << "{\"impl\": \"mmtrain\", \"layout\": \"" << (packed ? "packed" : "padded") << "\", \"processes\": " << env.world_size << ", \"dp_shard\": " << shard << ", \"ep\": " << ep
            << ", \"tokens_per_step\": " << tokens << ", \"step_ms\": " << median * 1e3
            << ", \"collective_wait_ms\": " << waits[waits.size() / 2] * 1e3
            << ", \"all_to_all_ms\": " << exchanges[exchanges.size() / 2] * 1e3
            << ", \"tokens_per_s\": " << tokens / median << ", \"peak_rss_mb\": " << peak_rss_mb()
            << ", \"training_rss_mb\": " << peak_rss_mb() - rss_before_model_mb << "}\n";
}
