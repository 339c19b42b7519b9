// The load-balancing loss as the sparse layers feed it (nn/load_balancing.h) against autograd over
// load_balancing_loss (transformers' formula, itself checked against the reference in
// test_qwen3_text): the same value and the same gradient into every layer's router logits, with
// padding masked out; a layer recomputed after finish() gets its gradient again without being
// counted twice; a backward before finish() is an error, not a silent zero.
#include <torch/torch.h>

#include "mm/nn/load_balancing.h"
#include "mm/nn/moe.h"
#include "testing.h"

namespace mm {
namespace {

constexpr int64_t kExperts = 5, kTopK = 2, kBatch = 2, kSeq = 7, kLayers = 3;

struct Layers {
  std::vector<torch::Tensor> logits;  // leaves [tokens, experts]
  torch::Tensor mask;                 // [batch, seq]
};

Layers random_layers() {
  torch::manual_seed(3);
  Layers l;
  for (int64_t i = 0; i < kLayers; ++i)
    l.logits.push_back(torch::randn({kBatch * kSeq, kExperts}, torch::kFloat64).requires_grad_(true));
  l.mask = torch::ones({kBatch, kSeq}, torch::kInt64);
  l.mask.index_put_({1, torch::indexing::Slice(4, torch::indexing::None)}, 0);  // right padding
  return l;
}

// Each layer's output [tokens, 3] passed through the loss (the output itself is a stand-in).
std::vector<torch::Tensor> run_layers(LoadBalancingLoss& loss, const Layers& l) {
  std::vector<torch::Tensor> outputs;
  for (const auto& logits : l.logits) {
    auto probs = torch::softmax(logits, -1, torch::kFloat32);
    auto chosen = std::get<1>(probs.topk(kTopK, -1));
    auto output = torch::zeros({kBatch * kSeq, 3}, torch::kFloat64).requires_grad_(true);
    outputs.push_back(loss.attach(output, probs, chosen));
  }
  return outputs;
}

// The routers' gradients from the loss alone (the layers' outputs get zero gradient).
std::vector<torch::Tensor> router_gradients(const std::vector<torch::Tensor>& outputs, const Layers& l) {
  std::vector<torch::Tensor> zero_grads;
  for (const auto& o : outputs) zero_grads.push_back(torch::zeros_like(o));
  return torch::autograd::grad(outputs, l.logits, zero_grads);
}

std::vector<torch::Tensor> reference_gradients(const Layers& l, double weight, double* value) {
  std::vector<torch::Tensor> fp32;
  for (const auto& logits : l.logits) fp32.push_back(logits.to(torch::kFloat32));
  auto aux = load_balancing_loss(fp32, kExperts, kTopK, l.mask);
  *value = aux.item<double>();
  auto grads = torch::autograd::grad({aux * weight}, l.logits);
  return grads;
}

TEST(LoadBalancingLoss, ValueAndRouterGradientsEqualAutogradOverTheFormula) {
  const auto layers = random_layers();
  const double weight = 0.37;
  double expected_value = 0;
  const auto expected = reference_gradients(layers, weight, &expected_value);

  LoadBalancingLoss loss(kExperts, kTopK, layers.mask);
  auto outputs = run_layers(loss, layers);
  EXPECT_EQ(loss.layers(), kLayers);
  EXPECT_NEAR(loss.finish(weight).item<double>(), expected_value, 1e-6);
  // The outputs pass their own gradient through unchanged.
  const auto out_grad = torch::randn({kBatch * kSeq, 3}, torch::kFloat64);
  auto grads = torch::autograd::grad({outputs[0], outputs[1], outputs[2]}, layers.logits,
                                     {out_grad, torch::zeros_like(out_grad), torch::zeros_like(out_grad)});
  for (int64_t i = 0; i < kLayers; ++i) {
    EXPECT_LT(testing::max_abs_diff(grads[i], expected[i]), 1e-7) << "layer " << i;
    EXPECT_GT(grads[i].abs().max().item<double>(), 1e-4) << "layer " << i << " got no gradient";
    // Padding rows get none.
    EXPECT_EQ(grads[i].narrow(0, kSeq + 4, 3).abs().max().item<double>(), 0.0);
  }
}

TEST(LoadBalancingLoss, UnmaskedTokensAllCount) {
  auto layers = random_layers();
  layers.mask = torch::ones_like(layers.mask);
  double expected_value = 0;
  const auto expected = reference_gradients(layers, 1.0, &expected_value);
  LoadBalancingLoss loss(kExperts, kTopK);  // no mask: every token is real (packed rows)
  auto outputs = run_layers(loss, layers);
  EXPECT_NEAR(loss.finish(1.0).item<double>(), expected_value, 1e-6);
  const auto grads = router_gradients(outputs, layers);
  for (int64_t i = 0; i < kLayers; ++i) EXPECT_LT(testing::max_abs_diff(grads[i], expected[i]), 1e-7) << i;
}

// What a recomputing block runner does: the first pass without grad counts, finish(), then the
// layer runs again with grad in backward and must get the same gradient, counted once.
TEST(LoadBalancingLoss, RecomputedLayersGetTheirGradientWithoutCountingTwice) {
  const auto layers = random_layers();
  double expected_value = 0;
  const auto expected = reference_gradients(layers, 2.0, &expected_value);
  LoadBalancingLoss loss(kExperts, kTopK, layers.mask);
  {
    torch::NoGradGuard no_grad;
    run_layers(loss, layers);
  }
  EXPECT_NEAR(loss.finish(2.0).item<double>(), expected_value, 1e-6);
  auto outputs = run_layers(loss, layers);  // the recomputation
  EXPECT_EQ(loss.layers(), kLayers);
  const auto grads = router_gradients(outputs, layers);
  for (int64_t i = 0; i < kLayers; ++i) EXPECT_LT(testing::max_abs_diff(grads[i], expected[i]), 1e-7) << i;
}

TEST(LoadBalancingLoss, BackwardBeforeFinishIsAnError) {
  const auto layers = random_layers();
  LoadBalancingLoss loss(kExperts, kTopK, layers.mask);
  auto outputs = run_layers(loss, layers);
  // The autograd engine rethrows the node's error as its own type; the message is kept.
  try {
    outputs[0].sum().backward();
    ADD_FAILURE() << "backward before finish() passed";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("backward before finish()"), std::string::npos) << e.what();
  }
}

TEST(LoadBalancingLoss, AMaskOfTheWrongLengthNamesBoth) {
  const auto layers = random_layers();
  LoadBalancingLoss loss(kExperts, kTopK, torch::ones({3, kSeq}));
  EXPECT_THROW_MSG(run_layers(loss, layers), "the attention mask has 21 positions but the layer routed 14 tokens");
}

}  // namespace
}  // namespace mm
