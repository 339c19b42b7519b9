// Wan benchmarks, mmtrain side; tests/reference/bench_wan.py is the diffusers side with the same
// arguments, shapes and weights (it also makes the models: bench_wan.py make DIR). One JSON line
// per run; each measurement runs in a fresh process so that its peak RSS is its own.
//   bench_wan train TRANSFORMER_DIR THREADS STEPS BATCH
//     a flow-matching training step of the DiT: noised latents [BATCH, 16, 5, 16, 16] + timesteps
//     + 64 text tokens -> velocity, MSE, backward, fused AdamW, fp32
//   bench_wan decode VAE_DIR THREADS REPEATS LATENT_FRAMES H W
//   bench_wan tiled_decode VAE_DIR THREADS REPEATS LATENT_FRAMES H W   (tiles 128, stride 96)
//     decode of [1, 16, LATENT_FRAMES, H / 8, W / 8] latents into 1 + 4 (LATENT_FRAMES - 1) frames
// Timings: one warm-up, then the median of STEPS / REPEATS; REPEATS 0: one cold decode, no warm-up.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "mm/models/wan/wan_vae.h"
#include "mm/models/diffusion/flow_matching_objective.h"
#include "mm/models/wan/wan_transformer.h"
#include "mm/train/optimizer.h"
#include "bench_memory.h"
#include "bench_timing.h"

using mm::bench::peak_rss_mb;

namespace {

constexpr int64_t kTextTokens = 64;
constexpr int64_t kChannels = 16, kFrames = 5, kHeight = 16, kWidth = 16;  // one sample's latents

nlohmann::ordered_json train(const std::string& dir, int steps, int64_t batch) {
  const double rss_before_model = peak_rss_mb();
  auto model = mm::WanTransformer3DModelImpl::from_pretrained(dir);
  model->train();
  mm::NamedParams named;
  for (auto& p : model->named_parameters()) named.emplace_back(p.key(), p.value());
  mm::AdamWConfig optim;
  optim.lr = 1e-4;
  optim.weight_decay = 0.01;
  mm::AdamW optimizer(named, optim);
  const mm::FlowMatchingObjective objective;  // uniform timesteps over the shift-5 training table
  auto generator = at::make_generator<at::CPUGeneratorImpl>(0);
  torch::manual_seed(0);
  const auto x0 = torch::randn({batch, kChannels, kFrames, kHeight, kWidth});
  const auto text = torch::randn({batch, kTextTokens, model->config().text_dim});

  const double ms = mm::bench::median_ms(
      [&] {
        const auto u = mm::sample_timestep_density(objective, batch, generator);
        const auto fm = mm::make_flow_matching_batch(objective, x0, torch::randn_like(x0), u);
        mm::flow_matching_loss(model->forward(fm.noisy, fm.timesteps, text), fm).backward();
        optimizer.step(optim.lr);
        optimizer.zero_grad();
      },
      steps);
  const auto& p = model->config().patch_size;
  const int64_t tokens = batch * (kFrames / p[0]) * (kHeight / p[1]) * (kWidth / p[2]);
  return {{"impl", "mmtrain"}, {"mode", "train"}, {"batch", batch}, {"latent_tokens_per_step", tokens},
          {"ms_per_step", ms}, {"steps_per_s", 1e3 / ms}, {"latent_tokens_per_s", tokens * 1e3 / ms},
          {"peak_rss_mb", peak_rss_mb()}, {"training_rss_mb", peak_rss_mb() - rss_before_model}};
}

nlohmann::ordered_json decode(const std::string& dir, const std::string& mode, int repeats, int64_t latent_frames,
                      int64_t height, int64_t width) {
  auto vae = mm::WanVAEImpl::from_pretrained(dir);
  vae->eval();
  const int64_t s = vae->config().spatial_compression();
  torch::manual_seed(0);
  const auto z = torch::randn({1, vae->config().z_dim, latent_frames, height / s, width / s});
  const mm::WanVAETiling tiling{128, 128, 96, 96};
  const bool tiled = mode == "tiled_decode";
  const double rss_before = peak_rss_mb();
  torch::NoGradGuard no_grad;
  const double ms = mm::bench::median_ms([&] { tiled ? vae->tiled_decode(z, tiling) : vae->decode(z); }, repeats);
  const int64_t frames = 1 + (latent_frames - 1) * vae->config().temporal_compression();
  return {{"impl", "mmtrain"}, {"mode", mode}, {"frames", frames}, {"height", height}, {"width", width},
          {"ms_per_decode", ms}, {"frames_per_s", frames * 1e3 / ms}, {"peak_rss_mb", peak_rss_mb()},
          {"decode_rss_mb", peak_rss_mb() - rss_before}};
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const bool is_decode = mode == "decode" || mode == "tiled_decode";
  if (!(mode == "train" && argc == 6) && !(is_decode && argc == 8)) {
    std::cerr << "usage: bench_wan train TRANSFORMER_DIR THREADS STEPS BATCH\n"
                 "       bench_wan decode|tiled_decode VAE_DIR THREADS REPEATS LATENT_FRAMES H W\n";
    return 2;
  }
  torch::set_num_threads(std::stoi(argv[3]));
  const auto result = mode == "train" ? train(argv[2], std::stoi(argv[4]), std::stoll(argv[5]))
                                      : decode(argv[2], mode, std::stoi(argv[4]), std::stoll(argv[5]),
                                               std::stoll(argv[6]), std::stoll(argv[7]));
  std::cout << result.dump() << "\n";
}
