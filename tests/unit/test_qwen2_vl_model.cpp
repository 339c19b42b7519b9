// Qwen2-VL, the third family through the registry, against transformers 5.17
// (tests/reference/qwen2_vl_model.py): M-RoPE positions exact (a video's temporal step is 1
// whatever its seconds per grid), logits within 1e-4 and 32 greedy tokens identical for every case
// of both configs (the transformers 5 layout with GQA, and the published flat layout with tied
// embeddings), bf16 no further from fp32 than transformers' bf16, and the export writing what transformers saved.
#include <algorithm>

#include "mm/models/qwen2_vl/qwen2_vl_vision.h"
#include "mm/nn/weights.h"
#include "mm/tasks/model_registry.h"
#include "bf16_fidelity.h"
#include "qwen_vl_parity.h"

namespace mm::testing {
namespace {

const std::string kOracle = "qwen2_vl_model";

QwenVLForConditionalGeneration load(const std::string& name, torch::Dtype dtype = torch::kFloat32) {
  return QwenVLForConditionalGenerationImpl::from_pretrained(model_dir(name, kOracle), dtype);
}

class Qwen2VLParity : public ::testing::TestWithParam<std::string> {};

TEST_P(Qwen2VLParity, TheRegistryOpensItWithItsOwnVisionTower) {
  EXPECT_EQ(model_spec_of(model_dir(GetParam(), kOracle)).name, "qwen2_vl");
  auto model = load(GetParam());
  EXPECT_EQ(model->config().model_type(), "qwen2_vl");
  EXPECT_NE(dynamic_cast<Qwen2VisionTransformerImpl*>(model->visual.get()), nullptr);
}

TEST_P(Qwen2VLParity, PositionIdsMatchGetRopeIndex) {
  auto model = load(GetParam());
  auto cases = cases_of(GetParam(), kOracle);
  for (const auto& c : kCases) {
    auto in = inputs_of(*cases, c);
    if (in.video_grid_thw.defined()) {
      ASSERT_FALSE(in.second_per_grid_ts.empty()) << c;  // given, and without effect on Qwen2-VL
      EXPECT_GT(in.second_per_grid_ts[0], 1.0) << c;
    }
    auto rope = model->get_rope_index(in);
    EXPECT_TRUE(torch::equal(rope.position_ids, field(*cases, c, "position_ids"))) << c;
    EXPECT_TRUE(torch::equal(rope.deltas, field(*cases, c, "rope_deltas"))) << c;
  }
}

TEST_P(Qwen2VLParity, LogitsMatchTransformers) {
  auto model = load(GetParam());
  expect_logits_match(*model, *cases_of(GetParam(), kOracle), "Qwen2-VL config " + GetParam());
}

TEST_P(Qwen2VLParity, ThirtyTwoGreedyTokensEqualTransformers) {
  auto model = load(GetParam());
  auto cases = cases_of(GetParam(), kOracle);
  EXPECT_EQ(model->config().eos_token_ids, std::vector<int64_t>{cases->tensor("eos_token_id").item<int64_t>()});
  expect_greedy_tokens_match(model, *cases);
}

TEST_P(Qwen2VLParity, Bfloat16ErrorIsNoLargerThanTransformers) {
  auto model = load(GetParam(), torch::kBFloat16);
  for (const auto& [name, tensor] : named_weights(*model)) ASSERT_EQ(tensor.scalar_type(), torch::kBFloat16) << name;
  expect_bf16_no_worse_than_transformers(*model, *cases_of(GetParam(), kOracle), "Qwen2-VL config " + GetParam());
}

INSTANTIATE_TEST_SUITE_P(Configs, Qwen2VLParity, ::testing::Values("A", "B"));

// The export writes the names and tensors of transformers' state dict (config B holds exactly
// those), and a config.json that loads back as Qwen2-VL with the same logits.
TEST(Qwen2VLModel, TheExportWritesTransformersNamesAndLoadsBack) {
  auto model = load("B");
  expect_export_writes_the_source(model, model_dir("B", kOracle), temp_dir("qwen2_vl_export"), *cases_of("B", kOracle),
                                  "qwen2_vl");
}

}  // namespace
}  // namespace mm::testing
