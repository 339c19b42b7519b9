// Context parallelism on the Wan DiT, mmtrain side (no reference: diffusers has no context
// parallelism of its own). Started as the cp ranks by `mmtrain launch --program` (alone: cp 1):
//   bench_context_parallel TRANSFORMER_DIR THREADS STEPS FRAMES ULYSSES
// one sample of latents [1, 16, FRAMES, 32, 32] (FRAMES x 16 x 16 video tokens) and 64 text tokens
// through a flow-matching training step (forward, backward, AdamW; fp32), its video tokens split
// over the ranks: Ulysses inside groups of ULYSSES ranks, ring attention across them. Gradients are
// not reduced between the ranks (FSDP would add its own collectives): the step is the model's
// compute and context parallelism's exchanges. Rank 0 prints one JSON line: the median step (one
// warm-up, then STEPS), its split into time waiting in all-to-alls, waiting for ring transfers and
// the rest, and the peak RSS of every rank (training: the peak minus before the model).
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "mm/models/diffusion/flow_matching_objective.h"
#include "mm/models/wan/wan_transformer.h"
#include "mm/parallel/autograd_collectives.h"
#include "mm/parallel/context_parallel.h"
#include "mm/parallel/ring_attention.h"
#include "mm/train/optimizer.h"
#include "bench_memory.h"
#include "bench_ranks.h"
#include "bench_timing.h"

using mm::bench::peak_rss_mb;

int main(int argc, char** argv) {
  if (argc != 6) {
    std::cerr << "usage: bench_context_parallel TRANSFORMER_DIR THREADS STEPS FRAMES ULYSSES\n";
    return 2;
  }
  torch::set_num_threads(std::stoi(argv[2]));
  const int steps = std::stoi(argv[3]);
  const int64_t frames = std::stoll(argv[4]), ulysses = std::stoll(argv[5]);
  const auto ranks = mm::bench::BenchRanks::join();
  const int64_t world = ranks.world, rank = ranks.rank;
  mm::parallel::ContextParallelGroups groups;
  if (ranks.job) {
    std::vector<int64_t> inner, outer;
    // Ulysses groups of consecutive ranks; ring groups of the ranks at the same place in theirs.
    for (int64_t j = 0; j < ulysses; ++j) inner.push_back(rank / ulysses * ulysses + j);
    for (int64_t i = 0; i < world / ulysses; ++i) outer.push_back(i * ulysses + rank % ulysses);
    groups.cp = ranks.everyone;
    if (ulysses > 1) groups.ulysses = mm::dist::new_gloo_group(*ranks.job, inner, "u" + std::to_string(rank / ulysses));
    if (world / ulysses > 1)
      groups.ring = mm::dist::new_gloo_group(*ranks.job, outer, "r" + std::to_string(rank % ulysses));
  }
  const double rss_before_model = peak_rss_mb();
  auto model = mm::WanTransformer3DModelImpl::from_pretrained(argv[1]);
  model->train();
  if (world > 1) model->context_parallel = mm::parallel::sequence_splitter(groups);
  mm::NamedParams named;
  for (auto& p : model->named_parameters()) named.emplace_back(p.key(), p.value());
  mm::AdamWConfig optim;
  optim.lr = 1e-4;
  mm::AdamW optimizer(named, optim);
  const mm::FlowMatchingObjective objective;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(0);
  torch::manual_seed(0);
  const auto x0 = torch::randn({1, 16, frames, 32, 32});
  const auto text = torch::randn({1, 64, model->config().text_dim});
  std::vector<double> all_to_all, ring;  // per call, the warm-up's first
  auto step = [&] {
    const auto u = mm::sample_timestep_density(objective, 1, generator);
    const auto fm = mm::make_flow_matching_batch(objective, x0, torch::randn_like(x0), u);
    mm::flow_matching_loss(model->forward(fm.noisy, fm.timesteps, text), fm).backward();
    optimizer.step(optim.lr);
    optimizer.zero_grad();
    all_to_all.push_back(mm::parallel::take_exchange_seconds() * 1e3);
    ring.push_back(mm::parallel::take_ring_wait_seconds() * 1e3);
  };
  const double ms = mm::bench::median_ms(step, steps);
  auto timed_mean = [&](const std::vector<double>& v) {
    double sum = 0;
    for (size_t i = 1; i < v.size(); ++i) sum += v[i];
    return v.size() > 1 ? sum / static_cast<double>(v.size() - 1) : 0.0;
  };
  const double all_to_all_ms = timed_mean(all_to_all), ring_ms = timed_mean(ring);
  // Every rank's peak (the largest is what a device must hold).
  const auto per_rank = ranks.from_every_rank(peak_rss_mb() - rss_before_model);
  if (rank != 0) return 0;
  const int64_t tokens = frames * 16 * 16;
  nlohmann::ordered_json out{{"impl", "mmtrain"}, {"cp", world}, {"ulysses", ulysses}, {"ring", world / ulysses},
                             {"video_tokens", tokens}, {"ms_per_step", ms}, {"all_to_all_wait_ms", all_to_all_ms},
                             {"ring_wait_ms", ring_ms}, {"video_tokens_per_s", tokens * 1e3 / ms}};
  out["training_rss_mb_per_rank"] = per_rank;
  out["max_training_rss_mb"] = *std::max_element(per_rank.begin(), per_rank.end());
  std::cout << out.dump() << "\n";
}
