// Qwen3-VL-MoE against transformers 5.17 (tests/reference/qwen3_vl_moe_model.py): Qwen3-VL with
// sparse MoE decoder layers whose checkpoints hold each layer's experts fused. Logits within 1e-4
// and 32 greedy tokens identical for every case of both configs, bf16 no further from fp32 than
// transformers' bf16, both fused layouts (save_pretrained's and the published x @ W one) loading
// the same model, and the export writing what transformers saved.
#include <algorithm>

#include "mm/models/qwen_vl/qwen_vl_state_dict.h"
#include "mm/nn/moe.h"
#include "mm/nn/weights.h"
#include "mm/tasks/model_registry.h"
#include "bf16_fidelity.h"
#include "qwen_vl_parity.h"

namespace mm::testing {
namespace {

const std::string kOracle = "qwen3_vl_moe_model";

QwenVLForConditionalGeneration load(const std::string& name, torch::Dtype dtype = torch::kFloat32) {
  return QwenVLForConditionalGenerationImpl::from_pretrained(model_dir(name, kOracle), dtype);
}

class Qwen3VLMoeParity : public ::testing::TestWithParam<std::string> {};

TEST_P(Qwen3VLMoeParity, TheRegistryOpensItWithSparseLayers) {
  EXPECT_EQ(model_spec_of(model_dir(GetParam(), kOracle)).name, "qwen3_vl_moe");
  auto model = load(GetParam());
  const auto& config = model->config();
  EXPECT_EQ(config.model_type(), "qwen3_vl_moe");
  EXPECT_TRUE(config.text.moe.norm_topk_prob);
  int sparse = 0;
  for (const auto& layer : *model->model->layers) sparse += layer->as<Qwen2DecoderLayer>()->moe ? 1 : 0;
  EXPECT_EQ(sparse, 2);  // A: layers 0 and 2 (layer 1 is in mlp_only_layers); B: both of its layers
  EXPECT_EQ(static_cast<bool>(model->model->layers[1]->as<Qwen2DecoderLayer>()->moe), GetParam() == "B");
}

TEST_P(Qwen3VLMoeParity, PositionsAndLogitsMatchTransformers) {
  auto model = load(GetParam());
  auto cases = cases_of(GetParam(), kOracle);
  for (const auto& c : kCases)
    EXPECT_TRUE(torch::equal(model->get_rope_index(inputs_of(*cases, c)).position_ids, field(*cases, c, "position_ids")))
        << c;
  expect_logits_match(*model, *cases, "Qwen3-VL-MoE config " + GetParam());
}

TEST_P(Qwen3VLMoeParity, ThirtyTwoGreedyTokensEqualTransformers) {
  auto model = load(GetParam());
  expect_greedy_tokens_match(model, *cases_of(GetParam(), kOracle));
}

TEST_P(Qwen3VLMoeParity, Bfloat16ErrorIsNoLargerThanTransformers) {
  auto model = load(GetParam(), torch::kBFloat16);
  expect_bf16_no_worse_than_transformers(*model, *cases_of(GetParam(), kOracle), "Qwen3-VL-MoE config " + GetParam());
}

INSTANTIATE_TEST_SUITE_P(Configs, Qwen3VLMoeParity, ::testing::Values("A", "B"));

// The published checkpoints store the fused experts as x @ W (transposed against what
// save_pretrained writes); both load the same model.
TEST(Qwen3VLMoeModel, ThePublishedFusedLayoutLoadsTheSameModel) {
  const auto dir = temp_dir("qwen3_vl_moe_published");
  for (const auto& entry : std::filesystem::directory_iterator(model_dir("B", kOracle)))
    if (entry.path().filename() != "model.safetensors") std::filesystem::copy_file(entry.path(), dir / entry.path().filename());
  const auto source = Checkpoint::open(model_dir("B", kOracle));
  std::vector<std::pair<std::string, torch::Tensor>> published;
  int transposed = 0;
  for (const auto& name : source.names()) {
    auto t = source.tensor(name);
    if (name.find("mlp.experts.") != std::string::npos) {
      t = t.transpose(1, 2).contiguous();
      ++transposed;
    }
    published.emplace_back(name, t);
  }
  EXPECT_EQ(transposed, 4);  // two sparse layers, gate_up_proj and down_proj each
  save_safetensors(dir / "model.safetensors", published);
  auto a = load("B");
  auto b = QwenVLForConditionalGenerationImpl::from_pretrained(dir);
  const auto wa = named_weights(*a), wb = named_weights(*b);
  ASSERT_EQ(wa.size(), wb.size());
  for (size_t i = 0; i < wa.size(); ++i) EXPECT_TRUE(torch::equal(wa[i].second, wb[i].second)) << wa[i].first;
  std::filesystem::remove_all(dir);
}

TEST(Qwen3VLMoeModel, AFusedTensorOfNeitherLayoutIsNamed) {
  NamedTensors tensors = {{"m.layers.0.mlp.experts.gate_up_proj", torch::zeros({2, 8, 7})},
                          {"m.layers.0.mlp.experts.down_proj", torch::zeros({2, 8, 4})}};
  EXPECT_THROW_MSG(split_fused_experts(tensors, 8, 4),
                   "m.layers.0.mlp.experts.gate_up_proj is [2, 8, 7], expected [experts, 8, 8] or [experts, 8, 8]");
  EXPECT_THROW_MSG(split_fused_experts({tensors[1]}, 8, 4), "m.layers.0.mlp.experts.down_proj has no gate_up_proj");
  // Split and fused again is the identity.
  NamedTensors ok = {{"x.mlp.experts.gate_up_proj", torch::randn({3, 8, 8})},
                     {"x.mlp.experts.down_proj", torch::randn({3, 8, 4})}, {"other", torch::ones({1})}};
  const auto split = split_fused_experts(ok, 8, 4);
  EXPECT_EQ(split.size(), 3u * 3 + 1);
  auto fused = fuse_experts(split);
  std::sort(fused.begin(), fused.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::sort(ok.begin(), ok.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  ASSERT_EQ(fused.size(), ok.size());
  for (size_t i = 0; i < ok.size(); ++i) {
    EXPECT_EQ(fused[i].first, ok[i].first);
    EXPECT_TRUE(torch::equal(fused[i].second, ok[i].second)) << ok[i].first;
  }
}

// The export writes the names and tensors of transformers' state dict (config B holds exactly
// those, its experts fused), and loads back with the same logits.
TEST(Qwen3VLMoeModel, TheExportWritesTransformersNamesAndLoadsBack) {
  auto model = load("B");
  expect_export_writes_the_source(model, model_dir("B", kOracle), temp_dir("qwen3_vl_moe_export"),
                                  *cases_of("B", kOracle), "qwen3_vl_moe");
}

}  // namespace
}  // namespace mm::testing
