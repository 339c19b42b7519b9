// mm::Linear with LoRA (PEFT's LoraLayer semantics) and apply_lora / merge_lora on the tiny
// Qwen2.5-VL: adapter math, names, init, freezing, the no-match error, merging; and building for
// loading (parameter_init.h): torch's init outside the guard, no random numbers drawn inside it.
#include <set>

#include "mm/nn/linear.h"
#include "mm/nn/lora.h"
#include "mm/nn/parameter_init.h"
#include "testing.h"
#include "tiny_qwen2_5_vl.h"

namespace mm::testing {
namespace {

std::set<std::string> names_of(const torch::nn::Module& m) {
  std::set<std::string> out;
  for (const auto& p : m.named_parameters()) out.insert(p.key());
  return out;
}

TEST(Linear, PlainForwardIsAffine) {
  Linear layer(5, 3, true);
  EXPECT_EQ(names_of(*layer), (std::set<std::string>{"weight", "bias"}));
  auto x = torch::randn({2, 4, 5});
  EXPECT_LT(max_abs_diff(layer(x), torch::matmul(x, layer->weight.t()) + layer->bias), 1e-6);
  Linear no_bias(5, 3, false);
  EXPECT_EQ(names_of(*no_bias), (std::set<std::string>{"weight"}));
}

TEST(Linear, InitializesAsTorch) {
  torch::manual_seed(3);
  torch::nn::Linear reference(torch::nn::LinearOptions(5, 3));
  torch::nn::Embedding reference_table(4, 2);
  torch::manual_seed(3);
  Linear layer(5, 3, true);
  auto table = embedding(4, 2);
  EXPECT_TRUE(torch::equal(layer->weight, reference->weight));
  EXPECT_TRUE(torch::equal(layer->bias, reference->bias));
  EXPECT_TRUE(torch::equal(table->weight, reference_table->weight));
}

// Under SkipParameterInit nothing of ours draws from the generator (a loaded model costs no
// random numbers); build_for_loading adds the dtype and restores the stream even where a libtorch
// module draws (Conv3d).
TEST(Linear, BuildingForLoadingDrawsNoRandomNumbers) {
  torch::manual_seed(11);
  const auto expected = torch::rand({4});
  torch::manual_seed(11);
  {
    SkipParameterInit overwritten_next;
    EXPECT_TRUE(parameter_init_skipped());
    Linear layer(64, 32, true);
    auto table = embedding(100, 8);
    EXPECT_TRUE(layer->weight.requires_grad() && table->weight.requires_grad());
    EXPECT_EQ(table->weight.sizes(), (std::vector<int64_t>{100, 8}));
    { SkipParameterInit inner; }
    EXPECT_TRUE(parameter_init_skipped());  // nested guards restore, not clear
  }
  EXPECT_FALSE(parameter_init_skipped());
  EXPECT_TRUE(torch::equal(torch::rand({4}), expected));

  torch::manual_seed(11);
  auto layer = build_for_loading(torch::kBFloat16, torch::kCPU, [] { return Linear(64, 32, true); });
  auto conv = build_for_loading(torch::kBFloat16, torch::kCPU,
                                [] { return torch::nn::Conv3d(torch::nn::Conv3dOptions(3, 8, 2)); });
  EXPECT_FALSE(parameter_init_skipped());
  EXPECT_EQ(c10::get_default_dtype_as_scalartype(), torch::kFloat32);
  EXPECT_TRUE(torch::equal(torch::rand({4}), expected));
  EXPECT_EQ(layer->weight.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(layer->bias.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(conv->weight.scalar_type(), torch::kBFloat16);
}

TEST(Linear, LoraAddsScaledLowRankUpdate) {
  torch::manual_seed(0);
  Linear layer(6, 4, true);
  auto x = torch::randn({3, 6});
  const auto before = layer(x).detach();
  layer->add_lora(/*rank=*/2, /*alpha=*/8, /*dropout=*/0.0);
  EXPECT_TRUE(layer->has_lora());
  EXPECT_EQ(names_of(*layer), (std::set<std::string>{"weight", "bias", "lora_A.weight", "lora_B.weight"}));
  EXPECT_EQ(layer->lora_A->weight.sizes(), (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(layer->lora_B->weight.sizes(), (std::vector<int64_t>{4, 2}));
  // PEFT's default init: B = 0 (output unchanged), A kaiming_uniform(a=sqrt(5)): |A| <= 1/sqrt(in).
  EXPECT_EQ(layer->lora_B->weight.abs().max().item<float>(), 0.0f);
  EXPECT_LE(layer->lora_A->weight.abs().max().item<double>(), 1.0 / std::sqrt(6.0) + 1e-7);
  EXPECT_GT(layer->lora_A->weight.abs().max().item<double>(), 0.0);
  EXPECT_EQ(max_abs_diff(layer(x), before), 0.0);

  torch::NoGradGuard no_grad;
  layer->lora_B->weight.normal_();
  const auto expected = before + torch::matmul(torch::matmul(x, layer->lora_A->weight.t()), layer->lora_B->weight.t()) * 4.0;
  EXPECT_LT(max_abs_diff(layer(x), expected), 1e-5);
  EXPECT_LT(max_abs_diff(torch::matmul(x, layer->merged_weight().t()) + layer->bias, expected), 1e-5);
  EXPECT_THROW_MSG(layer->add_lora(2, 8, 0.0), "already attached");

  layer->merge_lora();
  EXPECT_FALSE(layer->has_lora());
  EXPECT_EQ(names_of(*layer), (std::set<std::string>{"weight", "bias"}));
  EXPECT_LT(max_abs_diff(layer(x), expected), 1e-5);
}

TEST(Linear, LoraDropoutOnlyInTraining) {
  torch::manual_seed(1);
  Linear layer(16, 8, false);
  layer->add_lora(4, 4, 0.5);
  {
    torch::NoGradGuard no_grad;
    layer->lora_B->weight.normal_();
  }
  auto x = torch::randn({10, 16});
  layer->eval();
  const auto a = layer(x), b = layer(x);
  EXPECT_EQ(max_abs_diff(a, b), 0.0);
  layer->train();
  EXPECT_GT(max_abs_diff(layer(x), a), 1e-3);  // a dropout mask was drawn
}

TEST(ApplyLora, TargetsLanguageModelAndFreezesTheRest) {
  auto model = tiny_model(3);
  const auto count = apply_lora(*model, LoraConfig{});
  EXPECT_EQ(count, 2 * 7);  // 2 decoder layers x {q,k,v,o,gate,up,down}
  for (const auto& p : model->named_parameters()) {
    const bool adapter = p.key().find(".lora_") != std::string::npos;
    EXPECT_EQ(p.value().requires_grad(), adapter) << p.key();
    if (adapter) {
      EXPECT_EQ(p.key().rfind("model.layers.", 0), 0u) << p.key();
    }
  }
  const auto names = names_of(*model);
  EXPECT_TRUE(names.count("model.layers.0.self_attn.q_proj.lora_A.weight"));
  EXPECT_TRUE(names.count("model.layers.1.mlp.down_proj.lora_B.weight"));
  EXPECT_FALSE(names.count("visual.blocks.0.mlp.gate_proj.lora_A.weight"));
  EXPECT_FALSE(names.count("lm_head.lora_A.weight"));
}

TEST(ApplyLora, VisionAndCustomTargets) {
  auto model = tiny_model(3);
  LoraConfig config;
  config.target_modules = {"qkv", "q_proj"};
  config.exclude_prefixes = {};
  EXPECT_EQ(apply_lora(*model, config), 4 + 2);  // 4 vision blocks' qkv, 2 layers' q_proj
  EXPECT_TRUE(names_of(*model).count("visual.blocks.3.attn.qkv.lora_B.weight"));
}

TEST(ApplyLora, NoMatchListsTheLinears) {
  auto model = tiny_model(3);
  LoraConfig config;
  config.target_modules = {"query"};
  EXPECT_THROW_MSG(apply_lora(*model, config), "model.layers.0.self_attn.q_proj");
  EXPECT_THROW_MSG(apply_lora(*model, config), "[query]");
  // Nothing was frozen or attached by the failed call.
  for (const auto& p : model->parameters()) EXPECT_TRUE(p.requires_grad());
}

TEST(ApplyLora, MergeKeepsLogits) {
  auto model = tiny_model(5);
  model->eval();
  const auto c = tiny_config();
  auto in = tiny_sample(c, 4, 4, 4, 3, 11);
  LoraConfig config;
  config.exclude_prefixes = {};
  config.target_modules.push_back("qkv");
  apply_lora(*model, config);
  torch::NoGradGuard no_grad;
  const auto base = model->forward(in);
  for (const auto& p : model->named_parameters())
    if (p.key().find("lora_B") != std::string::npos) p.value().normal_(0.0, 0.2);
  const auto adapted = model->forward(in);
  EXPECT_GT(max_abs_diff(adapted, base), 1e-2);  // the adapters matter
  merge_lora(*model);
  for (const auto& name : names_of(*model)) EXPECT_EQ(name.find("lora_"), std::string::npos) << name;
  EXPECT_LT(max_abs_diff(model->forward(in), adapted), 1e-4);
}

}  // namespace
}  // namespace mm::testing
