// Activation recomputation through the block-runner hook: on the tiny Qwen2.5-VL (vision tower
// and decoder), every parameter gradient equals the one without recomputation, also with LoRA
// dropout (the RNG is replayed), with a first block whose input needs no gradient (frozen
// embeddings), and under bf16 CPU autocast.
#include <ATen/autocast_mode.h>

#include <map>

#include "mm/nn/lora.h"
#include "mm/train/recompute.h"
#include "testing.h"
#include "tiny_qwen2_5_vl.h"

namespace mm::testing {
namespace {

using Grads = std::map<std::string, torch::Tensor>;

// Loss and gradients of one training step; the global RNG is reseeded so both runs draw alike.
Grads step(QwenVLForConditionalGeneration& model, const QwenVLInputs& in, bool recompute, int calls = 1) {
  model->model->block_runner = recompute ? recompute_runner() : BlockRunner{};
  model->visual->block_runner = recompute ? recompute_runner() : BlockRunner{};
  at::autocast::clear_cache();  // as leaving an autocast region does between steps
  model->zero_grad();
  for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  torch::manual_seed(77);
  const double targets = static_cast<double>(in.input_ids.size(1) - 1);
  for (int i = 0; i < calls; ++i) (summed_next_token_loss(model->forward(in), in.input_ids) / targets).backward();
  Grads grads;
  for (const auto& p : model->named_parameters())
    if (p.value().requires_grad()) grads[p.key()] = p.value().grad().defined() ? p.value().grad().clone() : torch::Tensor();
  return grads;
}

void expect_same(const Grads& a, const Grads& b, double tolerance) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (const auto& [name, grad] : a) {
    ASSERT_TRUE(grad.defined()) << name << " got no gradient";
    ASSERT_TRUE(b.at(name).defined()) << name << " got no gradient with recompute";
    EXPECT_LE(max_abs_diff(grad, b.at(name)), tolerance) << name;
  }
}

double total_diff(const Grads& a, const Grads& b) {
  double d = 0;
  for (const auto& [name, grad] : a) d = std::max(d, max_abs_diff(grad, b.at(name)));
  return d;
}

TEST(Recompute, FullModelGradientsUnchanged) {
  auto model = tiny_model(21);
  model->train();
  auto in = tiny_sample(tiny_config(), 5, 4, 8, 6, 3);
  const auto plain = step(model, in, false);
  const auto recomputed = step(model, in, true);
  EXPECT_EQ(plain.size(), model->parameters().size());
  expect_same(plain, recomputed, 1e-6);
  // Gradients accumulate over micro-batches as without recompute.
  expect_same(step(model, in, false, 2), step(model, in, true, 2), 1e-6);
}

TEST(Recompute, LoraDropoutReplaysRng) {
  auto model = tiny_model(22);
  LoraConfig config;
  config.dropout = 0.3;
  config.exclude_prefixes = {};  // adapters (and dropout) in the vision blocks too
  config.target_modules.push_back("qkv");
  apply_lora(*model, config);
  {
    torch::NoGradGuard no_grad;
    for (const auto& p : model->named_parameters())
      if (p.key().find("lora_B") != std::string::npos) p.value().normal_(0.0, 0.1);
  }
  model->train();
  auto in = tiny_sample(tiny_config(), 3, 4, 4, 7, 4);
  // Embeddings are frozen: the first block's input needs no gradient, its parameters do.
  const auto plain = step(model, in, false);
  const auto recomputed = step(model, in, true);
  expect_same(plain, recomputed, 1e-6);
  // The dropout is live: another draw gives other gradients.
  model->model->block_runner = nullptr;
  model->visual->block_runner = nullptr;
  model->zero_grad();
  torch::manual_seed(78);
  (summed_next_token_loss(model->forward(in), in.input_ids) / static_cast<double>(in.input_ids.size(1) - 1)).backward();
  Grads other;
  for (const auto& p : model->named_parameters())
    if (p.value().requires_grad()) other[p.key()] = p.value().grad().clone();
  EXPECT_GT(total_diff(plain, other), 1e-4);
}

TEST(Recompute, Bf16CpuAutocast) {
  auto model = tiny_model(23);
  model->train();
  auto in = tiny_sample(tiny_config(), 4, 4, 4, 4, 5);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCPU, true);
  const auto plain = step(model, in, false);
  const auto recomputed = step(model, in, true);
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  expect_same(plain, recomputed, 1e-6);
  // Autocast was in effect: the fp32 gradients differ from the bf16 ones.
  EXPECT_GT(total_diff(plain, step(model, in, false)), 1e-4);
}

TEST(Recompute, InferencePassesThrough) {
  auto model = tiny_model(24);
  model->eval();
  auto in = tiny_sample(tiny_config(), 4, 4, 4, 4, 6);
  torch::NoGradGuard no_grad;
  const auto plain = model->forward(in);
  model->model->block_runner = recompute_runner();
  model->visual->block_runner = recompute_runner();
  EXPECT_EQ(max_abs_diff(model->forward(in), plain), 0.0);
}

}  // namespace
}  // namespace mm::testing
