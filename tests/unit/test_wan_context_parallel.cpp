// The Wan DiT under context parallelism (its sequence_splitter plan: the video tokens split over
// the cp ranks, self-attention across them, rotary tables and per-token conditioning sliced with
// the tokens, the output gathered) equals the DiT on one process, in fp64: on 2, 3 and 4 real Gloo
// processes (this binary re-executed as each rank) by Ulysses, ring and USP (2 x 2), T2V and I2V,
// per-token timesteps, with recomputation: every rank's output within 1e-10 of the one-process
// output, and the parameter gradients summed over the ranks within 1e-10 of the one-process ones.
// 27 video tokens: no degree divides them.
#include <torch/torch.h>

#include <iostream>

#include "mm/dist/process_group.h"
#include "mm/models/wan/wan_transformer.h"
#include "mm/parallel/context_parallel.h"
#include "mm/train/recompute.h"
#include "rank_job.h"
#include "rank_processes.h"
#include "testing.h"

namespace mm {
namespace {

using parallel::Group;

at::Tensor values(at::IntArrayRef shape, double salt) {
  const int64_t n = c10::multiply_integers(shape);
  return (torch::arange(n, torch::kFloat64) * 0.377 + salt).sin().view(shape);
}

WanTransformerConfig tiny_config(bool i2v) {
  WanTransformerConfig c;
  c.num_attention_heads = 4, c.attention_head_dim = 12, c.in_channels = 4, c.out_channels = 4, c.text_dim = 8;
  c.freq_dim = 16, c.ffn_dim = 32, c.num_layers = 2;
  if (i2v) c.image_dim = 6, c.added_kv_proj_dim = c.inner_dim();
  return c;
}

// The same weights on every rank (a fixed seed), in fp64.
WanTransformer3DModel tiny_model(bool i2v) {
  torch::manual_seed(3);
  WanTransformer3DModel model(tiny_config(i2v));
  model->to(torch::kFloat64);
  return model;
}

struct Inputs {
  at::Tensor latents, timestep, text, image, weight;
};

Inputs inputs(bool i2v, bool per_token) {
  Inputs in;
  in.latents = values({2, 4, 3, 6, 6}, 0.3);  // 3 x 3 x 3 = 27 tokens
  in.timestep = per_token ? (values({2, 27}, 1.1).abs() * 900) : torch::tensor({120.0, 870.0}, torch::kFloat64);
  in.text = values({2, 5, 8}, 2.2);
  if (i2v) in.image = values({2, 3, 6}, 3.3);
  in.weight = values({2, 4, 3, 6, 6}, 4.4);
  return in;
}

struct Result {
  at::Tensor out;
  std::vector<at::Tensor> grads;
};

// loss = sum(out * weight) / ranks (every rank computes the gathered output's whole loss).
Result run(WanTransformer3DModel& model, const Inputs& in, int64_t ranks) {
  model->zero_grad();
  auto out = model->forward(in.latents, in.timestep, in.text, in.image);
  ((out * in.weight).sum() / static_cast<double>(ranks)).backward();
  Result r{out.detach(), {}};
  for (const auto& p : model->parameters()) r.grads.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  return r;
}

int failures = 0;

void compare(const Result& split, const Result& whole, const Group& world, int64_t rank, const std::string& what) {
  double worst = (split.out - whole.out).abs().max().item<double>();
  for (size_t i = 0; i < split.grads.size(); ++i) {
    std::vector<at::Tensor> buffer{split.grads[i].clone()};
    world->allreduce(buffer)->wait();
    worst = std::max(worst, (buffer[0] - whole.grads[i]).abs().max().item<double>());
  }
  if (!(worst < 1e-10)) {
    std::cerr << "rank " << rank << ": " << what << ": off by " << worst << "\n";
    ++failures;
  }
}

int run_worker() {
  const auto [env, job, all] = testing::join_rank_job();
  const int64_t world = env.world_size, rank = env.rank;
  // The layouts of cp = world: Ulysses (4 heads: not over 3 ranks), ring, and USP 2 x 2 over 4.
  std::vector<std::pair<std::string, parallel::ContextParallelGroups>> layouts;
  if (4 % world == 0) layouts.push_back({"ulysses", {all, all, Group()}});
  layouts.push_back({"ring", {all, Group(), all}});
  if (world == 4) {
    const auto ulysses = dist::new_gloo_group(job, {rank / 2 * 2, rank / 2 * 2 + 1}, "u" + std::to_string(rank / 2));
    const auto ring = dist::new_gloo_group(job, {rank % 2, rank % 2 + 2}, "r" + std::to_string(rank % 2));
    layouts.push_back({"usp 2x2", {all, ulysses, ring}});
  }
  for (const bool i2v : {false, true})
    for (const bool per_token : {false, true}) {
      auto model = tiny_model(i2v);
      const auto in = inputs(i2v, per_token);
      const auto whole = run(model, in, 1);
      for (const auto& [name, groups] : layouts)
        for (const bool recompute : {false, true}) {
          model->context_parallel = parallel::sequence_splitter(groups);
          model->block_runner = recompute ? recompute_runner() : BlockRunner();
          const auto split = run(model, in, world);
          model->context_parallel = nullptr;
          model->block_runner = BlockRunner();
          compare(split, whole, all, rank,
                  name + (i2v ? ", I2V" : ", T2V") + (per_token ? ", per-token timesteps" : "") +
                      (recompute ? ", recomputed" : ""));
        }
    }
  all->barrier()->wait();
  return failures == 0 ? 0 : 3;
}

const int kWorkerStatus = testing::run_as_worker_if("MM_TEST_WAN_CP_WORKER", run_worker);

void expect_right_on(int world) {
  ASSERT_TRUE(dist::gloo_available()) << "built without Gloo";
  testing::expect_ranks_succeed(world, "MM_TEST_WAN_CP_WORKER");
}

TEST(WanContextParallel, TwoRanks) { expect_right_on(2); }
TEST(WanContextParallel, ThreeRanks) { expect_right_on(3); }
TEST(WanContextParallel, FourRanks) { expect_right_on(4); }

}  // namespace
}  // namespace mm
