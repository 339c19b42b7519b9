// The program `./mm gpu-check` runs on a machine with a CUDA GPU (tests/gpu/README.md):
//   1. parity: the models and the training step on CUDA equal the CPU path every test proves
//      against transformers/diffusers (tiny Qwen2.5-VL: logits, 16 greedy tokens, gradients, one
//      trainer step as one process takes it, through the sharding wrapper on a mesh of one, with
//      AdamW, and in bf16 autocast; tiny Wan DiT: output and gradients; the tiny Wan text-to-video
//      pipeline: prompt, guided UniPC sampling, VAE decode). TF32 is off, so fp32 on
//      the GPU must agree with the CPU to rounding.
//   2. speed at real tensor shapes (layers truncated to fit): one forward + backward of
//      Qwen2.5-VL-7B (4 decoder layers, 4 ViT blocks, a 448x448 image and 3840 text tokens) and of
//      two Wan2.1-14B blocks at 480p x 81 frames (32760 tokens), bf16 autocast over fp32 weights;
//      bench/gpu_reference.py times transformers and diffusers at the same shapes. Context
//      parallelism: six Wan2.1-1.3B blocks at the same 32760 tokens at cp 1, and at cp 2
//      (Ulysses, this program re-run as two ranks over NCCL) where the machine has two GPUs.
// Usage: gpu_check SOURCE_DIR [--no-bench] [--device cpu]. One JSON line per check and per
// benchmark on stdout; the exit status is the number of failed checks (2 when no GPU is visible).
// --device cpu runs the checks CPU against CPU, without benchmarks: a dry run of this program.
// gpu_check SOURCE_DIR --bf16-fidelity DIR: only mmtrain's logits for bench/gpu_fidelity.py.
#include <c10/core/CachingDeviceAllocator.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <nlohmann/json.hpp>

#include "mm/core/device.h"
#include "mm/core/error.h"
#include "mm/core/host_to_device.h"
#include "mm/core/json_config.h"
#include "mm/core/rng.h"
#include "mm/core/safetensors.h"
#include "mm/dist/nccl_group.h"
#include "mm/dist/process_group.h"
#include "mm/models/diffusion/flow_matching_objective.h"
#include "mm/models/qwen_vl/qwen_vl_config.h"
#include "mm/models/qwen_vl/qwen_vl_sharding.h"
#include "mm/models/wan/wan_pipeline.h"
#include "mm/models/wan/wan_pipeline_random.h"
#include "mm/models/wan/wan_transformer.h"
#include "mm/nn/blockwise_attention.h"
#include "mm/nn/varlen_attention.h"
#include "mm/nn/weights.h"
#include "mm/parallel/context_parallel.h"
#include "mm/parallel/fully_shard.h"
#include "mm/tasks/generation.h"
#include "mm/tasks/video_sampling.h"
#include "mm/tasks/vlm_step.h"
#include "mm/train/autocast.h"
#include "mm/train/model_flops.h"
#include "mm/train/optimizer.h"
#include "gpu/host_sync_counter.h"
#include "unit/tiny_qwen2_5_vl.h"

namespace fs = std::filesystem;

namespace {

// The device checked against the CPU: CUDA, or the CPU itself with --device cpu (a dry run of the
// program on a machine without a GPU).
torch::Device kCuda(torch::kCUDA, 0);
int failures = 0;

void report(const std::string& check, bool ok, nlohmann::json details = nlohmann::json::object()) {
  details["check"] = check;
  details["ok"] = ok;
  if (!ok) ++failures;
  std::cout << details.dump() << std::endl;
}

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.detach().to(torch::kCPU, torch::kFloat64) - b.detach().to(torch::kCPU, torch::kFloat64)).abs().max().item<double>();
}

// The largest difference of same-named gradients, relative to the largest CPU gradient.
double grad_diff(torch::nn::Module& cpu, torch::nn::Module& gpu) {
  auto theirs = gpu.named_parameters();
  double diff = 0, scale = 1e-12;
  for (const auto& p : cpu.named_parameters()) {
    if (!p.value().grad().defined()) continue;
    diff = std::max(diff, max_abs_diff(p.value().grad(), theirs[p.key()].grad()));
    scale = std::max(scale, p.value().grad().abs().max().item<double>());
  }
  return diff / scale;
}

mm::TrainSample train_sample(const mm::QwenVLConfig& config, int64_t before, int64_t after, uint64_t seed) {
  auto in = mm::testing::tiny_sample(config, before, 4, 8, after, seed);
  mm::TrainSample s;
  s.index = static_cast<int64_t>(seed);
  s.input_ids = in.input_ids[0];
  s.targets = torch::full_like(s.input_ids, mm::kIgnoreIndex);
  const int64_t n = s.input_ids.size(0);
  s.targets.slice(0, n - after - 1, n - 1).copy_(s.input_ids.slice(0, n - after, n));
  s.pixel_values = in.pixel_values;
  s.image_grid_thw = in.image_grid_thw;
  s.position_ids = mm::qwen_vl_rope_index(config, in).position_ids.squeeze(1);
  return s;
}

// The trainer's own step (padded batches of two samples, clipping, fused AdamW, lr 1e-3) on
// `model`'s device, `batches` in turn: as the trainer runs one process (through the sharding
// wrapper on a mesh of one, every unit replicated), or sharded over `mesh` with `sharding`.
// With `syncs`, the host's waits for the GPU in steps `counted_from` on are added to it by site.
std::vector<mm::StepResult> train_steps(mm::QwenVLForConditionalGeneration& model,
                                        const std::vector<mm::TrainBatch>& batches, int steps, bool bf16,
                                        const mm::parallel::DeviceMesh* mesh = nullptr,
                                        const mm::parallel::ShardingOptions& sharding = {},
                                        std::map<std::string, int64_t>* syncs = nullptr, int counted_from = 0) {
  const mm::parallel::DeviceMesh one_process;
  mm::parallel::FullyShardedModel wrapped(
      mm::qwen_vl_sharding_units(model, mm::ShardPlacement::shard, mm::ShardPlacement::shard),
      mesh ? *mesh : one_process, sharding, model->parameters().front().device());
  model->model->block_runner = model->visual->block_runner = wrapped.block_runner(nullptr);
  const auto named = wrapped.optimizer_parameters();
  std::vector<torch::Tensor> params;
  for (const auto& [_, p] : named) params.push_back(p);
  mm::AdamWConfig optim;
  optim.lr = 1e-3;
  mm::AdamW optimizer(named, optim);
  mm::StepOptions options;
  options.bf16_autocast = bf16;
  options.data_parallel = &wrapped;
  std::vector<mm::StepResult> results;
  for (int s = 0; s < steps; ++s) {
    std::optional<mm::gpu_check::HostSyncCounter> counter;
    if (syncs && s >= counted_from) counter.emplace();
    results.push_back(mm::train_step(model, optimizer, optim.lr, params, {batches[s % batches.size()]}, options));
    if (counter && syncs)
      for (const auto& [site, n] : counter->sites()) (*syncs)[site] += n;
  }
  wrapped.gather_all_for_export();  // the trained weights back in the module, for comparison
  model->model->block_runner = model->visual->block_runner = nullptr;
  return results;
}

std::vector<mm::TrainBatch> two_batches(const mm::QwenVLConfig& config) {
  return {mm::collate_padded({train_sample(config, 6, 9, 1), train_sample(config, 3, 5, 2)}, 0),
          mm::collate_padded({train_sample(config, 4, 7, 3), train_sample(config, 8, 4, 4)}, 0)};
}

void qwen_parity() {
  using mm::testing::tiny_model;
  auto cpu = tiny_model(5);
  auto gpu = tiny_model(5);
  gpu->to(kCuda);
  const auto config = cpu->config();
  const auto in = mm::testing::tiny_sample(config, 5, 4, 8, 6, 12);
  {
    torch::NoGradGuard no_grad;
    cpu->eval();
    gpu->eval();
    const auto a = cpu->forward(in), b = gpu->forward(in);
    report("qwen2_5_vl.logits_fp32", b.device() == kCuda && max_abs_diff(a, b) < 1e-4,
           {{"max_abs_diff", max_abs_diff(a, b)}, {"device", b.device().str()}});
    mm::GenerationConfig greedy;
    greedy.greedy = true;
    greedy.max_new_tokens = 16;
    const auto ta = mm::generate(cpu, in, greedy), tb = mm::generate(gpu, in, greedy);
    report("qwen2_5_vl.greedy_16_tokens", ta == tb, {{"cpu", ta}, {"cuda", tb}});
  }
  cpu->train();
  gpu->train();
  const auto la = mm::testing::summed_next_token_loss(cpu->forward(in), in.input_ids);
  const auto lb = mm::testing::summed_next_token_loss(gpu->forward(in), in.input_ids);
  la.backward();
  lb.backward();
  report("qwen2_5_vl.loss_and_gradients_fp32",
         std::abs(la.item<double>() - lb.item<double>()) < 1e-4 * std::abs(la.item<double>()) &&
             grad_diff(*cpu, *gpu) < 1e-4,
         {{"loss_cpu", la.item<double>()}, {"loss_cuda", lb.item<double>()}, {"grad_rel_diff", grad_diff(*cpu, *gpu)}});

  const auto batches = two_batches(config);
  auto step = [&](mm::QwenVLForConditionalGeneration& model, bool bf16) {
    return train_steps(model, batches, 1, bf16).front();
  };
  auto cpu_step = tiny_model(9), gpu_step = tiny_model(9);
  gpu_step->to(kCuda);
  const auto ra = step(cpu_step, false), rb = step(gpu_step, false);
  double weight_diff = 0;
  auto updated = gpu_step->named_parameters();
  for (const auto& p : cpu_step->named_parameters()) weight_diff = std::max(weight_diff, max_abs_diff(p.value(), updated[p.key()]));
  // AdamW's first step moves every weight by lr * g / (|g| + eps): a weight whose gradient is near
  // zero turns rounding-level gradient differences into a visible share of lr. So the updated
  // weights are held to a tenth of lr, the loss and the norm to rounding.
  report("qwen2_5_vl.train_step_fp32",
         std::abs(ra.loss - rb.loss) < 1e-5 * ra.loss && std::abs(ra.grad_norm - rb.grad_norm) < 1e-4 * ra.grad_norm &&
             weight_diff < 0.1 * 1e-3,
         {{"loss_cpu", ra.loss}, {"loss_cuda", rb.loss}, {"grad_norm_cpu", ra.grad_norm},
          {"grad_norm_cuda", rb.grad_norm}, {"weights_max_abs_diff", weight_diff}});
  auto gpu_bf16 = tiny_model(9);
  gpu_bf16->to(kCuda);
  const auto rc = step(gpu_bf16, true);
  report("qwen2_5_vl.train_step_bf16_autocast", std::isfinite(rc.loss) && std::abs(rc.loss - ra.loss) < 2e-2 * ra.loss,
         {{"loss_fp32_cpu", ra.loss}, {"loss_bf16_cuda", rc.loss}});

  // A training run of 10 steps (one optimizer, two alternating batches) on each device: the loss
  // curves agree step by step. AdamW's per-element normalisation lets rounding differences grow a
  // little each step, so the bound is relative 1e-3, far below what a wrong op gives.
  auto run = [&](mm::QwenVLForConditionalGeneration& model) {
    std::vector<double> losses;
    for (const auto& r : train_steps(model, batches, 10, false)) losses.push_back(r.loss);
    return losses;
  };
  auto cpu_run = tiny_model(11), gpu_run = tiny_model(11);
  gpu_run->to(kCuda);
  const auto la10 = run(cpu_run), lb10 = run(gpu_run);
  double worst = 0;
  for (size_t s = 0; s < la10.size(); ++s) worst = std::max(worst, std::abs(la10[s] - lb10[s]) / std::abs(la10[s]));
  report("qwen2_5_vl.ten_training_steps_fp32", worst < 1e-3 && la10.back() < la10.front(),
         {{"losses_cpu", la10}, {"losses_cuda", lb10}, {"max_rel_diff", worst}});
}

// The trainer's step on CUDA (bf16 autocast, fused AdamW, through the sharding wrapper), padded
// and packed batches: the host may wait for the GPU only where the step reads its loss and
// gradient norm back, at its end (mm::train_step itself). Any other wait (a copy from pageable
// memory, .item(), nonzero, a boolean index) stalls the queue mid-step and is named by its site.
void step_host_syncs() {
  const char* name = "qwen2_5_vl.step_host_syncs";
  if (!kCuda.is_cuda()) {
    // The dry run: the CPU has no syncs to count, so the counter's handling is shown on the
    // warning a sync raises (counted, by site) beside another warning (passed on, not counted).
    struct Passed : c10::WarningHandler {
      int seen = 0;
      void process(const c10::Warning&) override { ++seen; }
    } passed;
    c10::WarningUtils::WarningHandlerGuard outer(&passed);
    int64_t counted = 0;
    {
      mm::gpu_check::HostSyncCounter counter;
      TORCH_WARN("called a synchronizing CUDA operation");
      TORCH_WARN("an unrelated warning");
      counted = counter.total();
    }
    TORCH_WARN("after the counter");
    report(name, counted == 1 && passed.seen == 2,
           {{"skipped", "the CPU has no host syncs to count"}, {"counter_counted", counted},
            {"passed_on", passed.seen}});
    return;
  }
  if (!mm::gpu_check::HostSyncCounter::available()) {
    report(name, false, {{"error", "this build has no CUDA headers (torch's sync debug mode needs them)"}});
    return;
  }
  auto model = mm::testing::tiny_model(13);
  model->to(kCuda);
  const auto config = model->config();
  std::vector<mm::TrainBatch> batches = two_batches(config);
  batches.push_back(mm::collate_packed({train_sample(config, 6, 9, 5), train_sample(config, 3, 5, 6)}));
  std::map<std::string, int64_t> syncs;
  // Step 0 creates the optimizer's state; steps 1-3 (padded, packed, padded) are counted.
  train_steps(model, {batches[2], batches[0], batches[2], batches[1]}, 4, /*bf16=*/true, nullptr, {}, &syncs, 1);
  int64_t elsewhere = 0, at_end = 0;
  // The generic step (train/train_step.cpp), not the lambdas inside train_step functions.
  auto is_the_end = [](const std::string& site) {
    return site.rfind("mm::train_step(std::vector<mm::MicroBatchCounts", 0) == 0 &&
           site.find("{lambda") == std::string::npos;
  };
  for (const auto& [site, n] : syncs) (is_the_end(site) ? at_end : elsewhere) += n;
  report(name, elsewhere == 0,
         {{"steps", 3}, {"syncs_at_the_end", at_end}, {"syncs_elsewhere", elsewhere}, {"sites", syncs}});
}

// The Wan DiT's training step on CUDA as video training takes it (noise and timestep drawn on the
// CPU from a generator, the flow-matching batch, forward, loss, backward; bf16 autocast): no wait
// for the GPU anywhere in it (the trainer's own reads at its end are the VLM check's).
void wan_step_host_syncs(const fs::path& source) {
  const char* name = "wan_dit.step_host_syncs";
  if (!kCuda.is_cuda()) {
    report(name, true, {{"skipped", "the CPU has no host syncs to count (the counter: qwen2_5_vl.step_host_syncs)"}});
    return;
  }
  if (!mm::gpu_check::HostSyncCounter::available()) {
    report(name, false, {{"error", "this build has no CUDA headers (torch's sync debug mode needs them)"}});
    return;
  }
  const auto config = mm::WanTransformerConfig::from_file(source / "examples/wan/tiny-synth/transformer/config.json");
  torch::manual_seed(3);
  mm::WanTransformer3DModel model(config);
  model->to(kCuda);
  const mm::FlowMatchingObjective objective;
  auto generator = at::detail::createCPUGenerator(5);
  const auto latents = torch::randn({2, config.in_channels, 3, 8, 8}).to(kCuda);
  const auto text = torch::randn({2, 7, config.text_dim}).to(kCuda);
  std::map<std::string, int64_t> syncs;
  for (int step = 0; step < 3; ++step) {  // the first is a warm-up
    std::optional<mm::gpu_check::HostSyncCounter> counter;
    if (step > 0) counter.emplace();
    const auto noise = torch::randn(latents.sizes(), generator);
    const auto u = mm::sample_timestep_density(objective, 2, generator);
    const auto batch = mm::make_flow_matching_batch(objective, latents, mm::to_device_async(noise, kCuda), u);
    {
      mm::AutocastGuard autocast(true, c10::DeviceType::CUDA);
      mm::flow_matching_loss(model->forward(batch.noisy, batch.timesteps, text), batch).backward();
    }
    model->zero_grad();
    if (counter)
      for (const auto& [site, n] : counter->sites()) syncs[site] += n;
  }
  int64_t total = 0;
  for (const auto& [site, n] : syncs) total += n;
  report(name, total == 0, {{"steps", 2}, {"syncs", total}, {"sites", syncs}});
}

void wan_parity(const fs::path& source) {
  const auto config = mm::WanTransformerConfig::from_file(source / "examples/wan/tiny-synth/transformer/config.json");
  torch::manual_seed(3);
  mm::WanTransformer3DModel cpu(config);
  torch::manual_seed(3);
  mm::WanTransformer3DModel gpu(config);
  gpu->to(kCuda);
  auto gen = at::detail::createCPUGenerator(4);
  const auto latents = torch::randn({1, config.in_channels, 3, 8, 8}, gen);
  const auto text = torch::randn({1, 7, config.text_dim}, gen);
  const auto t = torch::tensor({500.0});
  const auto a = cpu->forward(latents, t, text), b = gpu->forward(latents, t, text);
  a.square().sum().backward();
  b.square().sum().backward();
  report("wan_dit.output_and_gradients_fp32",
         b.device() == kCuda && max_abs_diff(a, b) < 1e-4 && grad_diff(*cpu, *gpu) < 1e-4,
         {{"max_abs_diff", max_abs_diff(a, b)}, {"grad_rel_diff", grad_diff(*cpu, *gpu)}});
}

// The whole text-to-video pipeline where `mmtrain infer t2v --device` runs it: umT5 prompt
// embedding, classifier-free guidance over three UniPC steps of the DiT, the VAE decode, on the
// device against the CPU (a tiny random pipeline from the tiny-synth template, the same seeds).
void wan_sampling_parity(const fs::path& source) {
  const auto dir = source / "examples/wan/tiny-synth";
  const auto make = [&] {
    mm::WanLoadOptions configs_only;
    configs_only.text_encoder = configs_only.vae = configs_only.transformer = false;
    auto model = mm::WanModel::from_pretrained(dir, configs_only);
    mm::init_frozen_parts_randomly(*model, 5);
    torch::manual_seed(6);
    model->transformer = mm::WanTransformer3DModel(mm::WanTransformerConfig::from_file(dir / "transformer/config.json"));
    model->transformer->eval();
    return model;
  };
  auto cpu = make(), gpu = make();
  gpu->to(kCuda);
  mm::VideoSamplingOptions o;
  o.frames = 5;
  o.height = o.width = 32;
  o.steps = 3;
  o.guidance = 3.0;
  o.negative_prompt = "blurry";
  o.max_sequence_length = 16;
  const auto a = mm::sample_text_to_video(*cpu, {"a red ball rolls"}, o);
  const auto b = mm::sample_text_to_video(*gpu, {"a red ball rolls"}, o);
  const double latent_diff = max_abs_diff(a.latents, b.latents), video_diff = max_abs_diff(a.video, b.video);
  const double scale = a.latents.abs().max().item<double>();
  report("wan_pipeline.t2v_sampling_fp32",
         gpu->device() == kCuda && b.video.device().is_cpu() && latent_diff < 1e-4 * scale && video_diff < 1e-4,
         {{"latents_max_abs_diff", latent_diff}, {"latents_max_abs", scale}, {"video_max_abs_diff", video_diff}});
}

// from_pretrained straight onto the device (`infer --device`, `infer t2v --device`): a checkpoint
// written from a random tiny Wan DiT loads in bf16 on the device, every tensor equal to the
// source's cast (the fp32-kept ones in fp32), and on the device.
void load_on_device(const fs::path& source) {
  const auto tiny = source / "examples/wan/tiny-synth/transformer";
  torch::manual_seed(8);
  mm::WanTransformer3DModel model(mm::WanTransformerConfig::from_file(tiny / "config.json"));
  const auto dir = fs::temp_directory_path() / ("mm_gpu_check_load_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(tiny / "config.json", dir / "config.json");
  mm::save_safetensors(dir / "diffusion_pytorch_model.safetensors", mm::named_weights(*model));
  const auto loaded = mm::WanTransformer3DModelImpl::from_pretrained(dir, torch::kBFloat16, kCuda);
  fs::remove_all(dir);
  std::map<std::string, torch::Tensor> source_weights;
  for (const auto& [name, tensor] : mm::named_weights(*model)) source_weights[name] = tensor;
  bool on_device = true, equal = true;
  int64_t tensors = 0;
  for (const auto& [name, tensor] : mm::named_weights(*loaded)) {
    on_device = on_device && tensor.device() == kCuda;
    equal = equal && torch::equal(tensor.cpu(), source_weights.at(name).to(tensor.scalar_type()));
    ++tensors;
  }
  report("load.wan_dit_bf16_on_device", on_device && equal && tensors > 0, {{"tensors", tensors}});
}

// What a GPU run's checkpoint takes from the device: every generator's state (a resumed run draws
// the same numbers) and tensors written from device memory.
void checkpoint_pieces() {
  const auto on_device = torch::TensorOptions().device(kCuda);
  const auto state = mm::capture_rng_state();
  const auto drawn = torch::randn({4096}, on_device);
  mm::restore_rng_state(state);
  const auto again = torch::randn({4096}, on_device);
  report("rng.state_round_trip", torch::equal(drawn, again) && (!kCuda.is_cuda() || !state.cuda.empty()),
         {{"cuda_generators", state.cuda.size()}});
  const auto file = fs::temp_directory_path() / ("gpu_check_" + std::to_string(::getpid()) + ".safetensors");
  const auto weights = torch::randn({17, 5}, on_device).to(torch::kBFloat16);
  mm::save_safetensors(file, {{"w", weights}});
  const auto read = mm::SafetensorsFile::open(file)->tensor("w");
  report("safetensors.save_device_tensors", torch::equal(read, weights.cpu()), {{"dtype", "bf16"}});
  fs::remove(file);
}

// NCCL in a world of one rank (all a one-GPU machine allows): the world and a sub-group split
// from it are created bound and connected, and the collectives FSDP and DDP issue run on device
// tensors through their own streams. With --device cpu the same calls go through Gloo.
void collectives() {
  mm::dist::DistEnv env;
  env.master_port = 0;  // the store picks a free port; no other rank joins
  const auto job = mm::dist::rendezvous(env);
  c10::intrusive_ptr<c10d::Backend> world, sub;
  if (kCuda.is_cuda()) {
    world = mm::dist::new_nccl_world(job, kCuda);
    sub = mm::dist::split_nccl_group(job, world, {0}, "dp_shard-0", kCuda);
  } else {
    world = mm::dist::new_gloo_group(job, {0}, "world");
    sub = mm::dist::new_gloo_group(job, {0}, "dp_shard-0");
  }
  bool ok = true;
  for (const auto& group : {world, sub}) {
    auto x = torch::randn({1000}, torch::TensorOptions().device(kCuda));
    std::vector<torch::Tensor> sum{x.clone()};
    group->allreduce(sum)->wait();
    auto gathered = torch::empty_like(x);
    group->_allgather_base(gathered, x)->wait();
    auto scattered = torch::empty_like(x);
    auto input = x.clone();
    group->_reduce_scatter_base(scattered, input)->wait();
    ok = ok && torch::equal(sum[0], x) && torch::equal(gathered, x) && torch::equal(scattered, x) &&
         sum[0].device() == kCuda;
  }
  if (kCuda.is_cuda()) {
    mm::dist::shutdown_nccl_group(sub);
    mm::dist::shutdown_nccl_group(world);
  }
  report("nccl.world_of_one", ok, {{"backend", kCuda.is_cuda() ? "nccl" : "gloo"}});
}

// FSDP's sharded path on one device: both towers' units sharded over a dp_shard group of one rank
// (DeviceMesh's groups_of_one: NCCL on the GPU, where the copy-in, the all-gathers and the
// reductions run on their side streams ordered by events; Gloo with --device cpu). Ten steps must
// equal the same ten without collectives (fp32, 1e-6 relative); with parameters gathered in bf16
// (cast in the copy-in) and gradients reduced in fp32, the losses stay within 2% of fp32's.
void fsdp_stream_path() {
  mm::dist::DistEnv env;
  env.master_port = 0;
  const auto job = mm::dist::rendezvous(env);
  const mm::parallel::DeviceMesh mesh(job, {{mm::parallel::MeshDim::dp_shard, 1}}, kCuda, /*groups_of_one=*/true);
  auto make = [] {
    auto model = mm::testing::tiny_model(11);
    model->to(kCuda);
    return model;
  };
  const auto batches = two_batches(make()->config());
  auto plain = make(), sharded = make(), mixed = make();
  const auto a = train_steps(plain, batches, 10, false);
  const auto b = train_steps(sharded, batches, 10, false, &mesh);
  mm::parallel::ShardingOptions bf16;
  bf16.param_dtype = torch::kBFloat16;
  const auto c = train_steps(mixed, batches, 10, false, &mesh, bf16);
  std::vector<double> la, lb, lc;
  double loss_diff = 0, mixed_diff = 0, weight_diff = 0;
  for (size_t s = 0; s < a.size(); ++s) {
    la.push_back(a[s].loss);
    lb.push_back(b[s].loss);
    lc.push_back(c[s].loss);
    loss_diff = std::max(loss_diff, std::abs(a[s].loss - b[s].loss) / a[s].loss);
    mixed_diff = std::max(mixed_diff, std::abs(a[s].loss - c[s].loss) / a[s].loss);
  }
  auto theirs = sharded->named_parameters();
  for (const auto& p : plain->named_parameters())
    weight_diff = std::max(weight_diff, max_abs_diff(p.value(), theirs[p.key()]));
  report("fsdp.sharded_world_of_one_fp32", loss_diff <= 1e-6 && weight_diff <= 1e-6,
         {{"losses_plain", la}, {"losses_sharded", lb}, {"max_rel_loss_diff", loss_diff},
          {"weights_max_abs_diff", weight_diff}, {"backend", kCuda.is_cuda() ? "nccl" : "gloo"}});
  report("fsdp.bf16_gather_fp32_reduce", mixed_diff < 2e-2 && lc.back() < lc.front(),
         {{"losses_bf16_params", lc}, {"max_rel_diff_to_fp32", mixed_diff}});
}

// The stated bound of the bf16 attention checks: out, dq, dk, dv of `candidate`, each relative to
// the fp32 `reference`'s largest value, at most twice `baseline`'s error plus 1e-3. Fills `errors`.
bool within_twice_baseline(const std::vector<torch::Tensor>& candidate, const std::vector<torch::Tensor>& baseline,
                           const std::vector<torch::Tensor>& reference, const char* candidate_name,
                           const char* baseline_name, nlohmann::json& errors) {
  bool ok = true;
  const char* names[] = {"out", "dq", "dk", "dv"};
  for (size_t i = 0; i < 4; ++i) {
    const double ref_scale = reference[i].abs().max().item<double>();
    const double err = max_abs_diff(candidate[i], reference[i]) / ref_scale;
    const double base_err = max_abs_diff(baseline[i], reference[i]) / ref_scale;
    ok = ok && err <= 2 * base_err + 1e-3;
    errors[names[i]] = {{candidate_name, err}, {baseline_name, base_err}};
  }
  return ok;
}

// Packed and windowed attention in bf16: the flash varlen kernel (what a GPU runs) and the
// per-length SDPA path (what the CPU runs and the tests prove), each against the same attention in
// fp32, output and gradients, causal (packed samples) and not (vision windows), with grouped-query
// heads and uneven, one-token and long segments. Stated bound: the flash kernel's error relative
// to the fp32 result's largest value is at most twice the SDPA path's plus 1e-3. On the CPU (dry
// run) both are the SDPA path.
void varlen_attention() {
  const std::vector<int64_t> cu = {0, 64, 100, 164, 165, 400, 464, 1024};
  const int64_t seq = cu.back(), heads = 16, kv_heads = 2, head_dim = 128;
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  torch::manual_seed(11);
  const auto on = torch::TensorOptions().device(kCuda);
  const auto q32 = torch::randn({seq, heads, head_dim}, on), k32 = torch::randn({seq, kv_heads, head_dim}, on),
             v32 = torch::randn({seq, kv_heads, head_dim}, on), upstream = torch::randn({seq, heads, head_dim}, on);
  const mm::VarlenSegments segments(cu, kCuda);
  const auto kernel = kCuda.is_cuda() ? mm::VarlenKernel::flash : mm::VarlenKernel::sdpa;
  for (const bool causal : {true, false}) {
    auto run = [&](mm::VarlenKernel k, torch::ScalarType dtype) {
      auto q = q32.to(dtype).requires_grad_(true), kk = k32.to(dtype).requires_grad_(true),
           v = v32.to(dtype).requires_grad_(true);
      auto out = segments.attention(q, kk, v, scale, causal, k);
      auto grads = torch::autograd::grad({out}, {q, kk, v}, {upstream.to(dtype)});
      grads.insert(grads.begin(), out);
      return grads;  // out, dq, dk, dv
    };
    const auto reference = run(mm::VarlenKernel::sdpa, torch::kFloat);
    const auto sdpa = run(mm::VarlenKernel::sdpa, torch::kBFloat16);
    const auto fast = run(kernel, torch::kBFloat16);
    nlohmann::json errors;
    const bool ok = within_twice_baseline(fast, sdpa, reference, "kernel", "sdpa", errors);
    report(causal ? "varlen.flash_bf16_causal" : "varlen.flash_bf16_windows", ok,
           {{"kernel", kCuda.is_cuda() ? "flash_varlen" : "sdpa_per_length"}, {"relative_errors", errors}});
  }
}

// Ring attention's blocks on the device: the keys cut into three uneven blocks, each block's
// attention with its log-sum-exp merged into attention over all keys (attention_with_lse,
// merge_attention_parts) and each block's backward from the final out and lse
// (attention_block_backward), in bf16 (on a GPU the CUDA flash kernel, in the dry run the CPU's
// fused kernel), grouped-query heads. Stated bound as the varlen check's: the error relative to the
// fp32 result's largest value (one SDPA over all keys, autograd) at most twice bf16 SDPA's plus 1e-3.
void blockwise_attention() {
  const int64_t heads = 4, kv_heads = 2, head_dim = 64, q_len = 300;
  const std::vector<int64_t> cuts = {0, 200, 390, 520};
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  torch::manual_seed(12);
  const auto on = torch::TensorOptions().device(kCuda);
  const auto q32 = torch::randn({1, heads, q_len, head_dim}, on), k32 = torch::randn({1, kv_heads, cuts.back(), head_dim}, on),
             v32 = torch::randn({1, kv_heads, cuts.back(), head_dim}, on),
             upstream = torch::randn({1, heads, q_len, head_dim}, on);
  auto sdpa = [&](torch::ScalarType dtype) {
    auto q = q32.to(dtype).requires_grad_(true), k = k32.to(dtype).requires_grad_(true),
         v = v32.to(dtype).requires_grad_(true);
    auto out = at::scaled_dot_product_attention(q, k.repeat_interleave(heads / kv_heads, 1),
                                                v.repeat_interleave(heads / kv_heads, 1), {}, 0.0, false, scale);
    auto grads = torch::autograd::grad({out}, {q, k, v}, {upstream.to(dtype)});
    grads.insert(grads.begin(), out);
    return grads;  // out, dq, dk, dv
  };
  const auto reference = sdpa(torch::kFloat), half = sdpa(torch::kBFloat16);
  const auto q = q32.to(torch::kBFloat16), k = k32.to(torch::kBFloat16), v = v32.to(torch::kBFloat16);
  mm::AttentionPart total;
  for (size_t b = 0; b + 1 < cuts.size(); ++b) {
    const auto part = mm::attention_with_lse(q, k.narrow(2, cuts[b], cuts[b + 1] - cuts[b]),
                                             v.narrow(2, cuts[b], cuts[b + 1] - cuts[b]), {}, scale);
    total = b == 0 ? part : mm::merge_attention_parts(total, part);
  }
  auto dq = torch::zeros_like(q32);
  std::vector<torch::Tensor> dk, dv;
  for (size_t b = 0; b + 1 < cuts.size(); ++b) {
    const auto g = mm::attention_block_backward(q, k.narrow(2, cuts[b], cuts[b + 1] - cuts[b]),
                                                v.narrow(2, cuts[b], cuts[b + 1] - cuts[b]), {}, scale, total.lse,
                                                total.out, upstream.to(torch::kBFloat16));
    dq += g.dq.to(torch::kFloat);
    dk.push_back(g.dk.to(torch::kFloat));
    dv.push_back(g.dv.to(torch::kFloat));
  }
  const std::vector<torch::Tensor> blockwise = {total.out, dq, torch::cat(dk, 2), torch::cat(dv, 2)};
  nlohmann::json errors;
  const bool ok = within_twice_baseline(blockwise, half, reference, "blockwise", "sdpa_bf16", errors);
  report("blockwise.flash_lse_parts_bf16", ok,
         {{"kernel", kCuda.is_cuda() ? "cuda_flash" : "cpu_flash"}, {"relative_errors", errors}});
}

struct Timing {
  double median_ms;
  double peak_gib;
};

// Median wall time of `steps` synchronized calls after two warm-ups, and the peak allocation on
// `device` (a GPU; on the CPU, the dry run's, no peak: 0).
Timing time_steps(const std::function<void()>& f, int steps, c10::Device device = kCuda) {
  const bool gpu = device.is_cuda();
  const auto index = static_cast<c10::DeviceIndex>(gpu ? device.index() : 0);
  auto* allocator = gpu ? c10::getDeviceAllocator(c10::kCUDA) : nullptr;
  for (int i = 0; i < 2; ++i) f();
  if (gpu) {
    torch::cuda::synchronize(index);
    allocator->resetPeakStats(index);
  }
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    if (gpu) torch::cuda::synchronize(index);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  double peak = 0;
  if (gpu) {
    const auto stats = allocator->getDeviceStats(index);
    peak = static_cast<double>(
        stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak);
  }
  return {ms[ms.size() / 2], peak / (1024.0 * 1024 * 1024)};
}

// The benchmarks' shapes, and their model FLOPs per step by train/model_flops.h (the reference
// does the same computation: its MFU is these FLOPs over its own step time).
constexpr int64_t kQwenGrid = 32, kQwenText = 3840;
constexpr int64_t kWanFrames = 21, kWanHeight = 60, kWanWidth = 104, kWanText = 512;

double qwen_bench_flops(const mm::QwenVLConfig& config) {
  const int64_t tokens = 2 + kQwenGrid * kQwenGrid / 4 + kQwenText;  // vision start/end, image, text
  return mm::qwen_vl_training_flops(config, {tokens}, tokens, {{1, kQwenGrid, kQwenGrid}});
}

double wan_bench_flops(const mm::WanTransformerConfig& config) {
  const int64_t tokens = kWanFrames * (kWanHeight / 2) * (kWanWidth / 2);
  return mm::wan_dit_training_flops(config, 1, tokens, kWanText);
}

// The GPU's dense bf16 peak, from its name (MM_GPU_NAME, which ./mm gpu-check sets from nvidia-smi).
double peak_flops() {
  const char* name = std::getenv("MM_GPU_NAME");
  return mm::peak_bf16_flops(name ? name : "");
}

nlohmann::json mfu(double flops, double step_ms) {
  const double peak = peak_flops();
  return peak > 0 ? nlohmann::json(flops / (step_ms / 1e3) / peak) : nlohmann::json();
}

void bench_qwen(const fs::path& source) {
  const auto config = mm::QwenVLConfig::from_file(source / "bench/configs/qwen2_5_vl_7b_4_layers.json");
  torch::manual_seed(0);
  mm::QwenVLForConditionalGeneration model(config);
  model->to(kCuda);
  model->train();
  const int64_t grid = kQwenGrid, text = kQwenText, merged = grid * grid / 4;
  auto gen = at::detail::createCPUGenerator(1);
  auto ids = torch::cat({torch::tensor({config.vision_start_token_id}), torch::full({merged}, config.image_token_id, torch::kInt64),
                         torch::tensor({config.vision_end_token_id}), torch::randint(0, 150000, {text}, gen, torch::kInt64)});
  mm::QwenVLInputs in;
  in.input_ids = ids.unsqueeze(0);
  in.pixel_values = torch::randn({grid * grid, 3 * 2 * 14 * 14}, gen).to(kCuda);
  in.image_grid_thw = torch::tensor({int64_t{1}, grid, grid}).view({1, 3});
  in.input_ids = in.input_ids.to(kCuda);
  const int64_t tokens = ids.size(0);
  auto step = [&] {
    model->zero_grad();
    torch::Tensor loss;
    {
      mm::AutocastGuard autocast(true, c10::DeviceType::CUDA);
      loss = mm::testing::summed_next_token_loss(model->forward(in), in.input_ids) / static_cast<double>(tokens);
    }
    loss.backward();
  };
  const auto timing = time_steps(step, 5);
  const double flops = qwen_bench_flops(config);
  std::cout << nlohmann::json{{"bench", "qwen2_5_vl_7b_4_layers.fwd_bwd_bf16"}, {"impl", "mmtrain"},
                              {"tokens", tokens}, {"step_ms", timing.median_ms},
                              {"tokens_per_s", tokens / (timing.median_ms / 1e3)},
                              {"model_flops", flops}, {"mfu", mfu(flops, timing.median_ms)},
                              {"peak_gib", timing.peak_gib}}
                   .dump()
            << std::endl;
}

void bench_wan(const fs::path& source) {
  const auto config = mm::WanTransformerConfig::from_file(source / "bench/configs/wan2_1_14b_2_blocks.json");
  torch::manual_seed(0);
  mm::WanTransformer3DModel model(config);
  model->to(kCuda);
  model->train();
  auto gen = at::detail::createCPUGenerator(1);
  const auto latents = torch::randn({1, config.in_channels, kWanFrames, kWanHeight, kWanWidth}, gen).to(kCuda);
  const auto text = torch::randn({1, kWanText, config.text_dim}, gen).to(kCuda);
  const auto t = torch::tensor({500.0}).to(kCuda);
  const int64_t tokens = kWanFrames * (kWanHeight / 2) * (kWanWidth / 2);
  auto step = [&] {
    model->zero_grad();
    torch::Tensor loss;
    {
      mm::AutocastGuard autocast(true, c10::DeviceType::CUDA);
      loss = model->forward(latents, t, text).to(torch::kFloat32).square().mean();
    }
    loss.backward();
  };
  const auto timing = time_steps(step, 3);
  const double flops = wan_bench_flops(config);
  std::cout << nlohmann::json{{"bench", "wan2_1_14b_2_blocks.fwd_bwd_bf16"}, {"impl", "mmtrain"}, {"tokens", tokens},
                              {"step_ms", timing.median_ms}, {"tokens_per_s", tokens / (timing.median_ms / 1e3)},
                              {"model_flops", flops}, {"mfu", mfu(flops, timing.median_ms)}, {"peak_gib", timing.peak_gib}}
                   .dump()
            << std::endl;
}

// Packed-sample attention at Qwen2.5-VL-7B's decoder shapes (28 heads, 4 KV heads, head dim 128):
// 16384 tokens packed from 8 samples of uneven lengths, forward + backward in bf16, three ways:
// the flash varlen kernel, SDPA per segment length, and the dense block-diagonal mask the decoder
// used before (a [seq, seq] mask through SDPA).
void bench_varlen() {
  const std::vector<int64_t> cu = {0, 1024, 3072, 3584, 7680, 9728, 12288, 13312, 16384};
  const int64_t seq = cu.back(), heads = 28, kv_heads = 4, head_dim = 128;
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  const auto on = torch::TensorOptions().device(kCuda).dtype(torch::kBFloat16);
  auto q = torch::randn({seq, heads, head_dim}, on).requires_grad_(true);
  auto k = torch::randn({seq, kv_heads, head_dim}, on).requires_grad_(true);
  auto v = torch::randn({seq, kv_heads, head_dim}, on).requires_grad_(true);
  const auto upstream = torch::randn({seq, heads, head_dim}, on);
  const mm::VarlenSegments segments(cu, kCuda);
  std::vector<int64_t> segment_of;
  for (size_t i = 1; i < cu.size(); ++i) segment_of.insert(segment_of.end(), cu[i] - cu[i - 1], static_cast<int64_t>(i));
  const auto seg = torch::tensor(segment_of).to(kCuda);
  const auto pos = torch::arange(seq, torch::TensorOptions().device(kCuda));
  auto dense_step = [&] {
    const auto allowed = ((seg.view({seq, 1}) == seg.view({1, seq})) & (pos.view({1, seq}) <= pos.view({seq, 1})))
                             .view({1, 1, seq, seq});
    auto first = [](const torch::Tensor& t) { return t.transpose(0, 1).unsqueeze(0); };
    auto out = at::scaled_dot_product_attention(first(q), first(k), first(v), allowed, 0.0, false, scale, true);
    out.backward(first(upstream));
  };
  auto varlen_step = [&](mm::VarlenKernel kernel) {
    return [&, kernel] { segments.attention(q, k, v, scale, true, kernel).backward(upstream); };
  };
  for (const auto& [name, step] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"flash_varlen", varlen_step(mm::VarlenKernel::flash)},
           {"sdpa_per_length", varlen_step(mm::VarlenKernel::sdpa)},
           {"dense_block_mask", dense_step}}) {
    try {
      const auto timing = time_steps(step, 5);
      std::cout << nlohmann::json{{"bench", "packed_attention_qwen2_5_vl_7b.fwd_bwd_bf16"}, {"impl", name},
                                  {"tokens", seq}, {"step_ms", timing.median_ms}, {"peak_gib", timing.peak_gib}}
                       .dump()
                << std::endl;
    } catch (const std::exception& e) {
      std::cout << nlohmann::json{{"bench", "packed_attention_qwen2_5_vl_7b.fwd_bwd_bf16"}, {"impl", name},
                                  {"error", std::string(e.what()).substr(0, 500)}}
                       .dump()
                << std::endl;
    }
    q.mutable_grad().reset();
    k.mutable_grad().reset();
    v.mutable_grad().reset();
    torch::cuda::synchronize();
    c10::getDeviceAllocator(c10::kCUDA)->emptyCache();
  }
}

}  // namespace

// ---- Context parallelism: the Wan DiT's video tokens split over two ranks (Ulysses) ----------
// Two processes are needed (NCCL refuses two ranks on one GPU): this program re-runs itself as
// ranks 0 and 1 (`--cp-bench-rank`, the ranks' variables set as torchrun sets them), each bound
// to GPU LOCAL_RANK and joined by an NCCL world (Gloo on the CPU, in the dry run).

// One sample through the DiT: the shape and the steps timed.
struct CpShape {
  fs::path config;  // the transformer's config.json
  int64_t frames, height, width, text;  // latent frames and size, text tokens
  int steps;
};

std::vector<std::string> cp_shape_args(const CpShape& s) {
  return {s.config.string(), std::to_string(s.frames), std::to_string(s.height), std::to_string(s.width),
          std::to_string(s.text), std::to_string(s.steps)};
}

// The tiny-synth template's DiT at 48 video tokens: the loss of cp 2 against cp 1, in the dry run
// (fp32 on the CPU: equal within 1e-5) and on a machine with two GPUs (bf16: within 2%).
CpShape tiny_cp_shape(const fs::path& source) {
  return {source / "examples/wan/tiny-synth/transformer/config.json", 3, 8, 8, 16, 1};
}

// Wan2.1-1.3B's blocks (6 of its 30: bench/configs/wan2_1_1_3b_6_blocks.json) at 480p x 81 frames:
// 21 latent frames of 60 x 104, 32760 video tokens, 512 text tokens.
CpShape wan_1_3b_cp_shape(const fs::path& source) {
  return {source / "bench/configs/wan2_1_1_3b_6_blocks.json", kWanFrames, kWanHeight, kWanWidth, kWanText, 3};
}

// One bf16-autocast (fp32 on the CPU) forward + backward of the DiT on `shape` on `device`, its
// video tokens split over `groups` when cp > 1 (every rank gets the whole prediction, so the same
// loss): the first step's loss, the median step and the peak allocation of this rank.
nlohmann::json cp_step(const CpShape& shape, c10::Device device, const mm::parallel::ContextParallelGroups& groups,
                       int64_t cp) {
  const auto config = mm::WanTransformerConfig::from_file(shape.config);
  torch::manual_seed(0);
  mm::WanTransformer3DModel model(config);
  model->to(device);
  model->train();
  if (cp > 1) model->context_parallel = mm::parallel::sequence_splitter(groups);
  auto gen = at::detail::createCPUGenerator(1);
  const auto latents = torch::randn({1, config.in_channels, shape.frames, shape.height, shape.width}, gen).to(device);
  const auto text = torch::randn({1, shape.text, config.text_dim}, gen).to(device);
  const auto t = torch::tensor({500.0}).to(device);
  double first_loss = -1;
  auto step = [&] {
    model->zero_grad();
    torch::Tensor loss;
    {
      mm::AutocastGuard autocast(device.is_cuda(), c10::DeviceType::CUDA);
      loss = model->forward(latents, t, text).to(torch::kFloat32).square().mean();
    }
    loss.backward();
    if (first_loss < 0) first_loss = loss.item<double>();  // the first warm-up only: no sync in timed steps
  };
  const auto timing = time_steps(step, shape.steps, device);
  const int64_t tokens = shape.frames * (shape.height / 2) * (shape.width / 2);
  const double flops = mm::wan_dit_training_flops(config, 1, tokens, shape.text);
  return {{"cp", cp}, {"video_tokens", tokens}, {"loss", first_loss}, {"step_ms", timing.median_ms},
          {"video_tokens_per_s", static_cast<double>(tokens) / (timing.median_ms / 1e3)},
          {"mfu_per_gpu", device.is_cuda() ? mfu(flops / static_cast<double>(cp), timing.median_ms) : nlohmann::json()},
          {"peak_gib", timing.peak_gib}};
}

// A rank of a cp = 2 run (`gpu_check --cp-bench-rank CONFIG FRAMES HEIGHT WIDTH TEXT STEPS cuda|cpu`):
// prints its cp_step JSON with its rank.
int cp_rank_main(char** args) {
  const CpShape shape{args[0], std::stoll(args[1]), std::stoll(args[2]), std::stoll(args[3]), std::stoll(args[4]),
                      std::stoi(args[5])};
  const bool gpu = std::string(args[6]) == "cuda";
  const auto env = mm::dist::DistEnv::from_env();
  const auto job = mm::dist::rendezvous(env);
  const auto device = gpu ? mm::resolve_device("cuda", "gpu_check --cp-bench-rank") : c10::Device(c10::kCPU);
  mm::parallel::ContextParallelGroups groups;
  groups.cp = gpu ? mm::dist::new_nccl_world(job, device) : mm::dist::new_gloo_group(job, {0, 1}, "cp");
  groups.ulysses = groups.cp;  // cp = 2 = the Ulysses degree: one group
  auto out = cp_step(shape, device, groups, 2);
  out["rank"] = env.rank;
  std::cout << out.dump() << std::endl;
  if (gpu) mm::dist::shutdown_nccl_group(groups.cp);
  return 0;
}

int free_local_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Runs `shape` as two ranks of this program (a timeout ends a hung one) and returns their JSON
// lines by rank; throws with their output when one fails.
std::map<int64_t, nlohmann::json> run_cp_ranks(const fs::path& source, const CpShape& shape, bool gpu) {
  const auto self = fs::read_symlink("/proc/self/exe").string();
  std::string args;
  for (const auto& a : cp_shape_args(shape)) args += " '" + a + "'";
  const std::string port = std::to_string(free_local_port());
  std::string command = "(";
  for (int rank = 0; rank < 2; ++rank)
    command += "RANK=" + std::to_string(rank) + " LOCAL_RANK=" + std::to_string(rank) +
               " WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port +
               " OMP_NUM_THREADS=1 timeout 300 '" + self + "' '" + source.string() + "' --cp-bench-rank" + args +
               (gpu ? " cuda" : " cpu") + " & ";
  command += "wait) 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  MM_CHECK(pipe, "gpu_check: cannot start the cp ranks");
  std::string output;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe)) output += buffer;
  ::pclose(pipe);
  std::map<int64_t, nlohmann::json> by_rank;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '{') continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("rank")) by_rank[j["rank"].get<int64_t>()] = j;
  }
  MM_CHECK(by_rank.size() == 2, "gpu_check: the cp ranks did not both finish: ", output.substr(0, 3000));
  return by_rank;
}

// cp 2 (two ranks, Ulysses) gives cp 1's loss on the tiny DiT: on the CPU through Gloo (the dry
// run), on two GPUs through NCCL in bf16. One GPU cannot hold two NCCL ranks: skipped, saying so.
void context_parallel_check(const fs::path& source) {
  const bool gpu = kCuda.is_cuda();
  if (gpu && torch::cuda::device_count() < 2) {
    report("context_parallel.cp2_loss_equals_cp1", true,
           {{"skipped", "needs 2 GPUs (NCCL refuses two ranks on one); torch sees " +
                            std::to_string(torch::cuda::device_count())}});
    return;
  }
  const auto shape = tiny_cp_shape(source);
  const auto one = cp_step(shape, kCuda, {}, 1);
  const auto two = run_cp_ranks(source, shape, gpu);
  const double expected = one["loss"].get<double>();
  const double tolerance = gpu ? 2e-2 : 1e-5;
  bool ok = true;
  for (const auto& [rank, j] : two)
    ok = ok && std::abs(j["loss"].get<double>() - expected) <= tolerance * std::abs(expected);
  report("context_parallel.cp2_loss_equals_cp1", ok,
         {{"cp1_loss", expected}, {"cp2_loss_rank0", two.at(0)["loss"]}, {"cp2_loss_rank1", two.at(1)["loss"]},
          {"tolerance", tolerance}});
}

// The GPU variant of bench_context_parallel: Wan2.1-1.3B's blocks at 32760 tokens, cp 1 on one GPU
// and cp 2 (Ulysses) over two when the machine has them: step time, tokens/s, MFU per GPU and the
// peak allocation per rank.
void bench_wan_cp(const fs::path& source) {
  const auto shape = wan_1_3b_cp_shape(source);
  auto one = cp_step(shape, kCuda, {}, 1);
  one["bench"] = "wan2_1_1_3b_6_blocks.cp.fwd_bwd_bf16";
  std::cout << one.dump() << std::endl;
  torch::cuda::synchronize();
  c10::getDeviceAllocator(c10::kCUDA)->emptyCache();
  if (torch::cuda::device_count() < 2) {
    std::cout << nlohmann::json{{"bench", "wan2_1_1_3b_6_blocks.cp.fwd_bwd_bf16"}, {"cp", 2},
                                {"skipped", "needs 2 GPUs; torch sees " + std::to_string(torch::cuda::device_count())}}
                     .dump()
              << std::endl;
    return;
  }
  for (auto& [rank, j] : run_cp_ranks(source, shape, true)) {
    j["bench"] = "wan2_1_1_3b_6_blocks.cp.fwd_bwd_bf16";
    std::cout << j.dump() << std::endl;
  }
}

// bf16 fidelity at real shapes, mmtrain's side (bench/gpu_fidelity.py makes DIR and compares):
// the model of DIR/model loaded in fp32 and in bf16 on the device answers DIR/inputs.safetensors
// (transformers' processed inputs); the logits of every prompt position go to
// DIR/mmtrain_{fp32,bf16}.safetensors.
int bf16_fidelity(const fs::path& dir) {
  const auto inputs_file = mm::Checkpoint::open(dir / "inputs.safetensors");
  mm::QwenVLInputs inputs;
  inputs.input_ids = inputs_file.tensor("input_ids").clone();
  inputs.pixel_values = inputs_file.tensor("pixel_values").clone();
  inputs.image_grid_thw = inputs_file.tensor("image_grid_thw").clone();
  using Named = std::pair<std::string, torch::Dtype>;
  for (const auto& [name, dtype] : {Named{"fp32", torch::kFloat32}, Named{"bf16", torch::kBFloat16}}) {
    auto model = mm::QwenVLForConditionalGenerationImpl::from_pretrained(dir / "model", dtype, kCuda);
    model->eval();
    torch::NoGradGuard no_grad;
    const auto logits = model->forward(inputs)[0].to(torch::kCPU, torch::kFloat32).contiguous();
    mm::save_safetensors(dir / ("mmtrain_" + name + ".safetensors"),
                         std::vector<std::pair<std::string, at::Tensor>>{{"logits", logits}});
    std::cout << nlohmann::json{{"bf16_fidelity", name}, {"positions", static_cast<int64_t>(logits.size(0))}}.dump()
              << std::endl;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: gpu_check SOURCE_DIR [--no-bench] [--device cpu] [--bf16-fidelity DIR]\n";
    return 2;
  }
  const fs::path source = argv[1];
  if (argc == 10 && std::string(argv[2]) == "--cp-bench-rank") return cp_rank_main(argv + 3);
  bool bench = true;
  std::optional<fs::path> fidelity_dir;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--no-bench") {
      bench = false;
    } else if (arg == "--bf16-fidelity" && i + 1 < argc) {
      fidelity_dir = argv[++i];
    } else if (arg == "--device" && i + 1 < argc && std::string(argv[i + 1]) == "cpu") {
      kCuda = torch::Device(torch::kCPU);
      bench = false;
      ++i;
    } else {
      std::cerr << "gpu_check: unknown argument '" << arg
                << "' (SOURCE_DIR [--no-bench] [--device cpu] [--bf16-fidelity DIR])\n";
      return 2;
    }
  }
  if (kCuda.is_cuda() && !torch::cuda::is_available()) {
    std::cerr << "gpu_check: no CUDA device is visible to libtorch (torch::cuda::is_available() is false)\n";
    return 2;
  }
  // fp32 on the GPU must be fp32: TF32 matmuls would differ from the CPU by ~1e-3.
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(false);
  if (fidelity_dir) return bf16_fidelity(*fidelity_dir);
  const auto run = [](const char* name, const std::function<void()>& f) {
    try {
      f();
    } catch (const std::exception& e) {
      report(name, false, {{"error", std::string(e.what()).substr(0, 2000)}});
    }
  };
  run("qwen2_5_vl", qwen_parity);
  run("qwen2_5_vl.step_host_syncs", step_host_syncs);
  run("wan_dit", [&] { wan_parity(source); });
  run("wan_dit.step_host_syncs", [&] { wan_step_host_syncs(source); });
  run("wan_pipeline", [&] { wan_sampling_parity(source); });
  run("load", [&] { load_on_device(source); });
  run("checkpoint_pieces", checkpoint_pieces);
  run("nccl", collectives);
  run("fsdp", fsdp_stream_path);
  run("varlen", varlen_attention);
  run("blockwise", blockwise_attention);
  run("context_parallel", [&] { context_parallel_check(source); });
  // The benchmarks' model FLOPs per step (what MFU divides), printed by the dry run too.
  run("bench.model_flops", [&] {
    std::cout << nlohmann::json{{"bench_model_flops",
                                 {{"qwen2_5_vl_7b_4_layers", qwen_bench_flops(mm::QwenVLConfig::from_file(
                                                                 source / "bench/configs/qwen2_5_vl_7b_4_layers.json"))},
                                  {"wan2_1_14b_2_blocks", wan_bench_flops(mm::WanTransformerConfig::from_file(
                                                              source / "bench/configs/wan2_1_14b_2_blocks.json"))}}},
                                {"gpu", std::getenv("MM_GPU_NAME") ? std::getenv("MM_GPU_NAME") : ""},
                                {"peak_bf16_flops", peak_flops()}}
                     .dump()
              << std::endl;
  });
  if (bench) {
    run("bench.qwen2_5_vl", [&] { bench_qwen(source); });
    torch::cuda::synchronize();
    c10::getDeviceAllocator(c10::kCUDA)->emptyCache();
    run("bench.wan", [&] { bench_wan(source); });
    torch::cuda::synchronize();
    c10::getDeviceAllocator(c10::kCUDA)->emptyCache();
    run("bench.varlen", bench_varlen);
    torch::cuda::synchronize();
    c10::getDeviceAllocator(c10::kCUDA)->emptyCache();
    run("bench.wan_cp", [&] { bench_wan_cp(source); });
  }
  std::cout << nlohmann::json{{"failures", failures}}.dump() << std::endl;
  return failures;
}
