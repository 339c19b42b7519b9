// Qwen3.5-MoE against transformers 5.17 (tests/reference/qwen3_5_moe_model.py): Qwen3.5 whose
// decoder layers are all sparse, a router's renormalised top-k of the experts beside a gated shared
// expert (sigmoid(shared_expert_gate x) times its MLP). Positions exact, logits within 1e-4 and 32
// greedy tokens identical for every case of both configs (A as save_pretrained writes it, experts
// one by one; B in the module-tree layout with the experts fused as transformers holds them), bf16
// no further from fp32 than transformers' bf16, and the export writing what save_pretrained wrote.
#include "mm/nn/moe.h"
#include "mm/nn/weights.h"
#include "mm/tasks/model_registry.h"
#include "bf16_fidelity.h"
#include "qwen_vl_parity.h"

namespace mm::testing {
namespace {

const std::string kOracle = "qwen3_5_moe_model";

QwenVLForConditionalGeneration load(const std::string& name, torch::Dtype dtype = torch::kFloat32) {
  return QwenVLForConditionalGenerationImpl::from_pretrained(model_dir(name, kOracle), dtype);
}

class Qwen3_5MoeParity : public ::testing::TestWithParam<std::string> {};

TEST_P(Qwen3_5MoeParity, TheRegistryOpensItWithSparseLayersAndSharedExperts) {
  EXPECT_EQ(model_spec_of(model_dir(GetParam(), kOracle)).name, "qwen3_5_moe");
  auto model = load(GetParam());
  const auto& config = model->config();
  EXPECT_EQ(config.model_type(), "qwen3_5_moe");
  EXPECT_TRUE(config.text.moe.norm_topk_prob);
  for (const auto& layer : *model->model->layers) {
    const auto& moe = layer->as<Qwen2DecoderLayer>()->moe;
    ASSERT_TRUE(moe);
    EXPECT_TRUE(moe->shared_expert && moe->shared_expert_gate);
  }
}

TEST_P(Qwen3_5MoeParity, PositionsAndLogitsMatchTransformers) {
  auto model = load(GetParam());
  auto cases = cases_of(GetParam(), kOracle);
  expect_positions_match(*model, *cases);
  expect_logits_match(*model, *cases, "Qwen3.5-MoE config " + GetParam());
}

TEST_P(Qwen3_5MoeParity, ThirtyTwoGreedyTokensEqualTransformers) {
  auto model = load(GetParam());
  expect_greedy_tokens_match(model, *cases_of(GetParam(), kOracle));
}

TEST_P(Qwen3_5MoeParity, Bfloat16ErrorIsNoLargerThanTransformers) {
  auto model = load(GetParam(), torch::kBFloat16);
  expect_bf16_no_worse_than_transformers(*model, *cases_of(GetParam(), kOracle), "Qwen3.5-MoE config " + GetParam());
}

INSTANTIATE_TEST_SUITE_P(Configs, Qwen3_5MoeParity, ::testing::Values("A", "B"));

// Without the shared expert the logits move far from the reference's (so the parity above proves
// it is added, gated): its gate's weight zeroed halves its contribution, sigmoid(0) = 0.5.
TEST(Qwen3_5MoeModel, TheSharedExpertCounts) {
  auto model = load("A");
  auto cases = cases_of("A", kOracle);
  torch::NoGradGuard no_grad;
  for (const auto& layer : *model->model->layers) layer->as<Qwen2DecoderLayer>()->moe->shared_expert_gate->weight.zero_();
  const auto in = inputs_of(*cases, "image");
  EXPECT_GT(max_abs_diff(model->forward(in), field(*cases, "image", "logits")), 1e-3);
}

// save_pretrained writes the experts one by one (A): the export writes exactly that, and loads
// back as Qwen3.5-MoE with the same logits.
TEST(Qwen3_5MoeModel, TheExportWritesWhatSavePretrainedWrote) {
  auto model = load("A");
  expect_export_writes_the_source(model, model_dir("A", kOracle), temp_dir("qwen3_5_moe_export"),
                                  *cases_of("A", kOracle), "qwen3_5_moe");
}

}  // namespace
}  // namespace mm::testing
