// Expert parallelism (parallel/expert_parallel.h) on 2 and 4 real Gloo processes: every rank
// routes its own tokens (a different number on each rank) through a sparse MoE block whose
// experts are spread over the ranks, and must get what one process computes over all ranks'
// tokens with every expert: the outputs of its tokens, its input's gradient, its experts'
// gradients (which hold every rank's tokens), and the router's gradient summed over ranks. In
// fp64, so that any difference is a bug and not rounding.
#include <torch/torch.h>

#include <chrono>
#include <iostream>

#include "mm/dist/process_group.h"
#include "mm/parallel/expert_parallel.h"
#include "rank_processes.h"
#include "testing.h"

namespace mm {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kHidden = 6;

MoEOptions options_for(int64_t experts) { return {kHidden, 5, experts, 2, /*norm_topk_prob=*/true, "silu"}; }

SparseMoeBlock make_block(int64_t experts) {
  torch::manual_seed(17);
  SparseMoeBlock block(options_for(experts));
  block->to(torch::kFloat64);
  return block;
}

int64_t tokens_of(int64_t rank) { return 3 + 2 * rank; }

at::Tensor input_of(int64_t rank, at::IntArrayRef shape, double salt = 0) {
  const int64_t n = c10::multiply_integers(shape);
  return (torch::arange(n, torch::kFloat64) * 0.71 + static_cast<double>(rank) * 5.0 + salt).sin().view(shape);
}

int failures = 0;
void check(bool ok, int64_t rank, const std::string& what) {
  if (!ok) {
    std::cerr << "rank " << rank << ": " << what << " differs from one process\n";
    ++failures;
  }
}
// Both undefined counts as equal: an expert no token chose gets no gradient in either.
bool same(const at::Tensor& a, const at::Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  return a.sizes() == b.sizes() && torch::allclose(a, b, 0, 1e-12);
}

int run_worker() {
  const auto env = dist::DistEnv::from_env();
  dist::RendezvousOptions rendezvous;
  rendezvous.timeout = 30s;
  auto group = dist::init_gloo_group(env, rendezvous);
  const int64_t r = env.rank, world = env.world_size;
  const int64_t experts = 2 * world;

  // One process: every rank's tokens through the whole block.
  auto reference = make_block(experts);
  std::vector<at::Tensor> inputs, weights;
  for (int64_t i = 0; i < world; ++i) {
    inputs.push_back(input_of(i, {tokens_of(i), kHidden}));
    weights.push_back(input_of(i, {tokens_of(i), kHidden}, 3.0));
  }
  auto all = torch::cat(inputs).requires_grad_(true);
  auto all_out = reference->forward(all);
  (all_out * torch::cat(weights)).sum().backward();
  int64_t first_row = 0;
  for (int64_t i = 0; i < r; ++i) first_row += tokens_of(i);

  // Expert parallel: this rank's tokens only.
  auto block = make_block(experts);
  const auto mine = parallel::apply_expert_parallel(*block, group);
  check(mine.first == 2 * r && mine.count == 2, r, "the expert range");
  auto x = inputs[static_cast<size_t>(r)].clone().requires_grad_(true);
  auto out = block->forward(x);
  (out * weights[static_cast<size_t>(r)]).sum().backward();

  check(same(out.detach(), all_out.detach().narrow(0, first_row, tokens_of(r))), r, "the output");
  check(same(x.grad(), all.grad().narrow(0, first_row, tokens_of(r))), r, "the input gradient");
  for (int64_t e = 0; e < experts; ++e) {
    const auto ours = block->experts[static_cast<size_t>(e)]->named_parameters();
    const auto theirs = reference->experts[static_cast<size_t>(e)]->named_parameters();
    for (const auto& p : ours) {
      const auto name = "expert " + std::to_string(e) + " " + p.key();
      if (mine.contains(e)) {
        check(same(p.value().grad(), theirs[p.key()].grad()), r, name + " gradient");
      } else {
        check(p.value().numel() == 0 && !p.value().requires_grad(), r, name + " (not released)");
      }
    }
  }
  std::vector<at::Tensor> gate_grad = {block->gate->weight.grad().clone()};
  group->allreduce(gate_grad)->wait();
  check(same(gate_grad[0], reference->gate->weight.grad()), r, "the router gradient summed over ranks");
  group->barrier()->wait();
  return failures == 0 ? 0 : 3;
}

const int kWorkerStatus = testing::run_as_worker_if("MM_TEST_EP_WORKER", run_worker);

void expect_equal_to_one_process(int world) {
  ASSERT_TRUE(dist::gloo_available()) << "built without Gloo";
  testing::expect_ranks_succeed(world, "MM_TEST_EP_WORKER");
}

TEST(ExpertParallel, TwoRanksEqualOneProcess) { expect_equal_to_one_process(2); }
TEST(ExpertParallel, FourRanksEqualOneProcess) { expect_equal_to_one_process(4); }

TEST(ExpertParallel, RangesCoverTheExpertsAndABadSizeIsNamed) {
  EXPECT_EQ(parallel::local_experts(8, 4, 3).first, 6);
  EXPECT_EQ(parallel::local_experts(8, 4, 3).count, 2);
  EXPECT_THROW_MSG(parallel::local_experts(6, 4, 0), "ep=4 does not divide the model's 6 experts");
}

}  // namespace
}  // namespace mm
