// Gated DeltaNet under context parallelism, in fp64, against the same layer over the whole
// sequence on one process (the layer itself is proven against transformers in
// test_gated_delta_net.cpp). On 2 and 4 real Gloo processes (this binary re-executed as each
// rank), each rank holds its zig-zag share of the tokens, as the decoder's split gives them, and
// the layer runs head-parallel: outputs and input gradients of its tokens within 1e-10, and every
// parameter's gradient summed over the ranks within 1e-10 of the one-process gradient. One
// document and packed documents (the conv window and the state restart at each), lengths that 2 x
// ranks does not divide, a chunk size smaller than the documents (the state crosses chunks); on 2
// ranks the heads travel per key head (2 key heads, 4 value heads), on 4 per value head (q and k
// copied to each). Heads that the ranks cannot split are refused, naming both head counts.
#include <torch/torch.h>

#include <iostream>

#include "mm/dist/process_group.h"
#include "mm/nn/gated_delta_net.h"
#include "mm/parallel/context_parallel.h"
#include "rank_job.h"
#include "rank_processes.h"
#include "testing.h"

namespace mm {
namespace {

GatedDeltaNetOptions layer_options(int64_t key_heads, int64_t value_heads) {
  GatedDeltaNetOptions o;
  o.hidden_size = 24;
  o.num_key_heads = key_heads;
  o.num_value_heads = value_heads;
  o.key_head_dim = 6;
  o.value_head_dim = 5;
  o.conv_kernel = 3;
  o.chunk_size = 4;
  return o;
}

// The same weights on every rank: drawn from one seed, then made larger than the init so the gates
// and the conv matter.
GatedDeltaNet make_layer(const GatedDeltaNetOptions& options) {
  torch::manual_seed(11);
  GatedDeltaNet layer(options);
  layer->to(torch::kFloat64);
  torch::NoGradGuard no_grad;
  for (auto& p : layer->parameters()) p.add_(torch::randn_like(p) * 0.3);
  return layer;
}

at::Tensor values(at::IntArrayRef shape, double salt) {
  const int64_t n = c10::multiply_integers(shape);
  return (torch::arange(n, torch::kFloat64) * 0.377 + salt).sin().view(shape);
}

int failures = 0;

void report(double err, int64_t rank, const std::string& what) {
  if (!(err < 1e-10)) {
    std::cerr << "rank " << rank << ": " << what << ": off by " << err << "\n";
    ++failures;
  }
}

double worst(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

void check_case(const std::vector<int64_t>& cu_seqlens, const SequenceSplitter& splitter, int64_t rank) {
  const std::string name = "documents ending at " + std::to_string(cu_seqlens.back()) + " (" +
                           std::to_string(cu_seqlens.size() - 1) + " of them)";
  auto layer = make_layer(layer_options(2, 4));
  const int64_t total = cu_seqlens.back();
  const auto x = values({1, total, 24}, 0.2), weight = values({1, total, 24}, 1.7);

  // One process: the whole sequence (packed documents through cu_seqlens).
  auto whole = x.clone().requires_grad_(true);
  const std::vector<int64_t> documents = cu_seqlens.size() > 2 ? cu_seqlens : std::vector<int64_t>{};
  const auto reference = layer->forward(whole, {}, documents);
  (reference * weight).sum().backward();
  std::vector<at::Tensor> reference_grads;
  for (auto& p : layer->parameters()) {
    reference_grads.push_back(p.grad().clone());
    p.mutable_grad() = at::Tensor();
  }

  // This rank's tokens through the head-parallel layer.
  const auto split = splitter(cu_seqlens, /*causal=*/true);
  auto mine = split->take(x, 1).requires_grad_(true);
  const auto out = layer->forward(mine, {}, {}, nullptr, split.get());
  (out * split->take(weight, 1)).sum().backward();
  report(worst(out.detach(), split->take(reference.detach(), 1)), rank, name + ": output");
  report(worst(mine.grad(), split->take(whole.grad(), 1)), rank, name + ": input gradient");
  const auto params = layer->named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& grad = params[i].value().grad();
    report(worst(split->sum(grad.defined() ? grad : torch::zeros_like(params[i].value())), reference_grads[i]), rank,
           name + ": gradient of " + params[i].key());
  }
}

int run_worker() {
  const auto [env, job, group] = testing::join_rank_job();
  const auto splitter = parallel::sequence_splitter({group, group, nullptr});
  for (const auto& cu_seqlens : std::vector<std::vector<int64_t>>{{0, 13}, {0, 5, 14, 21}})
    check_case(cu_seqlens, splitter, env.rank);

  // Three key and value heads: neither 2 nor 4 ranks can split them.
  try {
    auto layer = make_layer(layer_options(3, 3));
    const auto split = splitter({0, 16}, true);
    layer->forward(split->take(values({1, 16, 24}, 0.0), 1), {}, {}, nullptr, split.get());
    std::cerr << "rank " << env.rank << ": no refusal of 3 heads\n";
    ++failures;
  } catch (const std::exception& e) {
    if (std::string(e.what()).find("neither linear_num_key_heads (3) nor linear_num_value_heads (3) is a multiple of " +
                                   std::to_string(env.world_size)) == std::string::npos) {
      std::cerr << "rank " << env.rank << ": the refusal says: " << e.what() << "\n";
      ++failures;
    }
  }
  group->barrier()->wait();
  return failures == 0 ? 0 : 3;
}

const int kWorkerStatus = testing::run_as_worker_if("MM_TEST_CP_DELTANET_WORKER", run_worker);

TEST(GatedDeltaNetContextParallel, TwoRanksByKeyHeadEqualOneProcess) {
  ASSERT_TRUE(dist::gloo_available()) << "built without Gloo";
  testing::expect_ranks_succeed(2, "MM_TEST_CP_DELTANET_WORKER");
}

TEST(GatedDeltaNetContextParallel, FourRanksByValueHeadEqualOneProcess) {
  ASSERT_TRUE(dist::gloo_available()) << "built without Gloo";
  testing::expect_ranks_succeed(4, "MM_TEST_CP_DELTANET_WORKER");
}

}  // namespace
}  // namespace mm
