// Qwen2.5-VL parity with transformers 5.17 (tests/reference/qwen2_5_vl_model.py): logits of every
// case and config within 1e-4, M-RoPE positions exact, both checkpoint layouts and the sharded
// copy, bf16 no further from fp32 than transformers' bf16, and the errors for broken checkpoints,
// configs and placeholder counts.
#include <algorithm>
#include <functional>
#include <fstream>

#include "mm/core/json_config.h"
#include "mm/models/qwen_vl/qwen_vl_hf_export.h"
#include "mm/models/qwen_vl/qwen_vl_state_dict.h"
#include "mm/nn/rotary.h"
#include "mm/nn/weights.h"
#include "bf16_fidelity.h"
#include "qwen_vl_parity.h"

namespace mm::testing {
namespace {

using Model = QwenVLForConditionalGeneration;

Model load(const std::string& name, torch::Dtype dtype = torch::kFloat32) {
  return QwenVLForConditionalGenerationImpl::from_pretrained(model_dir(name), dtype);
}

class ModelParity : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelParity, PositionIdsMatchGetRopeIndex) {
  auto model = load(GetParam());
  auto cases = cases_of(GetParam());
  for (const auto& c : kCases) {
    auto in = inputs_of(*cases, c);
    auto rope = model->get_rope_index(in);
    EXPECT_TRUE(torch::equal(rope.position_ids, field(*cases, c, "position_ids"))) << c;
    EXPECT_TRUE(torch::equal(rope.deltas, field(*cases, c, "rope_deltas"))) << c;
  }
}

TEST_P(ModelParity, LogitsMatchTransformers) {
  auto model = load(GetParam());
  expect_logits_match(*model, *cases_of(GetParam()), "config " + GetParam());
}

TEST_P(ModelParity, Bfloat16ErrorIsNoLargerThanTransformers) {
  auto model = load(GetParam(), torch::kBFloat16);
  for (const auto& [name, tensor] : named_weights(*model)) ASSERT_EQ(tensor.scalar_type(), torch::kBFloat16) << name;
  expect_bf16_no_worse_than_transformers(*model, *cases_of(GetParam()), "config " + GetParam());
}

INSTANTIATE_TEST_SUITE_P(Configs, ModelParity, ::testing::Values("A", "B"));

// The checkpoint fills every parameter, so building the model draws no random init (for 1.3B
// parameters that was seconds of a load), and loading leaves a seeded run's stream as it was.
TEST(Qwen2_5_VLModel, FromPretrainedLeavesTheRandomStreamAsItWas) {
  torch::manual_seed(5);
  const auto expected = torch::rand({4});
  torch::manual_seed(5);
  auto model = load("A", torch::kBFloat16);
  EXPECT_TRUE(torch::equal(torch::rand({4}), expected));
}

TEST(Qwen2_5_VLModel, TiedEmbeddingsHaveNoLmHead) {
  auto a = load("A");
  auto b = load("B");
  EXPECT_TRUE(a->lm_head);
  EXPECT_FALSE(b->lm_head);  // B is tied; its checkpoint has no lm_head.weight either
  EXPECT_FALSE(Checkpoint::open(model_dir("B")).contains("lm_head.weight"));
  EXPECT_TRUE(Checkpoint::open(model_dir("B")).contains("model.language_model.embed_tokens.weight"));
  EXPECT_TRUE(Checkpoint::open(model_dir("A")).contains("model.embed_tokens.weight"));
}

// Loader and export share one name map (qwen_vl_state_dict.h): a checkpoint transformers saved
// comes back out under exactly its names, tensor for tensor; an old-layout one in the new layout.
TEST(Qwen2_5_VLModel, TheExportWritesTheNamesTransformersSaves) {
  const auto out = temp_dir("qwen_export_names");
  std::filesystem::remove_all(out);
  auto model = load("B");
  export_hf(model, model_dir("B"), out);
  const auto source = Checkpoint::open(model_dir("B"));
  const auto exported = Checkpoint::open(out);
  auto names = exported.names();
  auto expected = source.names();
  std::sort(names.begin(), names.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(names, expected);
  for (const auto& name : expected) EXPECT_TRUE(torch::equal(exported.tensor(name), source.tensor(name))) << name;
  for (const auto& name : expected) {
    const auto module_name = qwen_vl_module_name(name, /*tied_embeddings=*/true);
    EXPECT_EQ(qwen_vl_hf_name(module_name), name);
  }
  EXPECT_EQ(qwen_vl_module_name("model.embed_tokens.weight", false), "model.embed_tokens.weight");  // old layout
  EXPECT_EQ(qwen_vl_module_name("lm_head.weight", true), "");
  std::filesystem::remove_all(out);
}

TEST(Qwen2_5_VLModel, ShardedCheckpointLoadsTheSameWeights) {
  ASSERT_TRUE(std::filesystem::exists(model_dir("A_sharded") / "model.safetensors.index.json"));
  auto whole = load("A");
  auto sharded = load("A_sharded");
  auto expected = named_weights(*whole);
  auto got = named_weights(*sharded);
  ASSERT_EQ(expected.size(), got.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(expected[i].first, got[i].first);
    EXPECT_TRUE(torch::equal(expected[i].second, got[i].second)) << expected[i].first;
  }
  auto cases = cases_of("A");
  torch::NoGradGuard no_grad;
  auto in = inputs_of(*cases, "text");
  EXPECT_TRUE(torch::equal(whole->forward(in), sharded->forward(in)));
}

// A copy of model A whose weights are `tensors` (and the same config files).
std::filesystem::path broken_copy(const std::string& name,
                                  const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  auto dir = temp_dir(name);
  std::filesystem::copy_file(model_dir("A") / "config.json", dir / "config.json");
  save_safetensors(dir / "model.safetensors", tensors);
  return dir;
}

std::vector<std::pair<std::string, torch::Tensor>> tensors_of_a() {
  auto ckpt = Checkpoint::open(model_dir("A"));
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& name : ckpt.names()) out.emplace_back(name, ckpt.tensor(name));
  return out;
}

TEST(Qwen2_5_VLModel, MissingTensorIsNamed) {
  auto tensors = tensors_of_a();
  std::erase_if(tensors, [](const auto& t) { return t.first == "model.norm.weight"; });
  auto dir = broken_copy("missing", tensors);
  EXPECT_THROW_MSG(QwenVLForConditionalGenerationImpl::from_pretrained(dir, torch::kFloat32),
                   "missing: model.norm.weight");
}

TEST(Qwen2_5_VLModel, WrongShapeIsNamed) {
  auto tensors = tensors_of_a();
  for (auto& [name, tensor] : tensors)
    if (name == "model.layers.1.self_attn.k_proj.weight") tensor = torch::zeros({64, 64});
  auto dir = broken_copy("shape", tensors);
  EXPECT_THROW_MSG(QwenVLForConditionalGenerationImpl::from_pretrained(dir, torch::kFloat32),
                   "model.layers.1.self_attn.k_proj.weight is [64, 64], expected [32, 64]");
}

TEST(Qwen2_5_VLModel, UnexpectedTensorIsNamed) {
  auto tensors = tensors_of_a();
  tensors.emplace_back("model.layers.7.mlp.up_proj.weight", torch::zeros({2, 2}));
  auto dir = broken_copy("unexpected", tensors);
  EXPECT_THROW_MSG(QwenVLForConditionalGenerationImpl::from_pretrained(dir, torch::kFloat32),
                   "unexpected: model.layers.7.mlp.up_proj.weight");
}

// Sizes in config.json are bounded before anything is allocated: by the checkpoint's own layer
// and block counts, and by the machine's memory (also for a model built from its config alone).
TEST(Qwen2_5_VLModel, ConfigSizesBeyondTheCheckpointOrTheMachineFailFastNamingTheKey) {
  const auto with = [](const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
    auto json = read_json_file(model_dir("A") / "config.json");
    edit(json);
    auto dir = temp_dir(name);
    std::ofstream(dir / "config.json") << json.dump();
    std::filesystem::copy_file(model_dir("A") / "model.safetensors", dir / "model.safetensors",
                               std::filesystem::copy_options::overwrite_existing);
    return dir;
  };
  EXPECT_THROW_MSG(QwenVLForConditionalGenerationImpl::from_pretrained(
                       with("huge_layers", [](auto& j) { j["text_config"]["num_hidden_layers"] = 1000000000; })),
                   "text_config.num_hidden_layers (1000000000) x a decoder layer");
  const auto held = load("A")->config().text.num_hidden_layers;
  EXPECT_THROW_MSG(QwenVLForConditionalGenerationImpl::from_pretrained(
                       with("more_layers", [&](auto& j) { j["text_config"]["num_hidden_layers"] = held + 1; })),
                   str_cat("text_config.num_hidden_layers is ", held + 1, ", but the checkpoint in"));
  EXPECT_THROW_MSG(QwenVLForConditionalGenerationImpl::from_pretrained(
                       with("more_blocks", [](auto& j) { j["vision_config"]["depth"] = 40; })),
                   "vision_config.depth is 40, but the checkpoint in");
  EXPECT_THROW_MSG(QwenVLForConditionalGenerationImpl::from_pretrained(
                       with("huge_vocab", [](auto& j) { j["text_config"]["vocab_size"] = int64_t{1} << 40; })),
                   "text_config.vocab_size (1099511627776) x hidden_size");
}

TEST(Qwen2_5_VLModel, ConfigMissingRequiredKeyIsNamed) {
  auto json = read_json_file(model_dir("A") / "config.json");
  json["text_config"].erase("num_hidden_layers");
  auto dir = temp_dir("config_key");
  std::ofstream(dir / "config.json") << json.dump();
  std::filesystem::copy_file(model_dir("A") / "model.safetensors", dir / "model.safetensors");
  EXPECT_THROW_MSG(QwenVLForConditionalGenerationImpl::from_pretrained(dir, torch::kFloat32),
                   "text_config.num_hidden_layers: missing required key");
}

TEST(Qwen2_5_VLModel, MissingDirectoryIsNamed) {
  EXPECT_THROW_MSG(QwenVLForConditionalGenerationImpl::from_pretrained("/nonexistent/qwen", torch::kFloat32),
                   "/nonexistent/qwen is not a directory");
}

TEST(Qwen2_5_VLModel, PlaceholderCountMustMatchFeatures) {
  auto model = load("A");
  auto cases = cases_of("A");
  torch::NoGradGuard no_grad;
  auto in = inputs_of(*cases, "image");
  const int64_t image_token = model->config().image_token_id;
  // One more placeholder than the 12 embeddings of the (1, 6, 8) image, in the text after it.
  auto ids = in.input_ids.clone();
  ids[0][ids.size(1) - 2] = image_token;
  in.input_ids = ids;
  EXPECT_THROW_MSG(model->forward(in), "input_ids has 13 image placeholder tokens (id 290) but image_grid_thw gives 12");
  // Placeholders without pixel values.
  auto text_only = inputs_of(*cases, "image");
  text_only.pixel_values = torch::Tensor();
  EXPECT_THROW_MSG(model->forward(text_only), "but no pixel values were given");
  // A grid row that matches no placeholder run.
  auto extra_grid = inputs_of(*cases, "text");
  extra_grid.image_grid_thw = torch::tensor({{1, 4, 4}}, torch::kInt64);
  EXPECT_THROW_MSG(model->get_rope_index(extra_grid), "image_grid_thw has 1 rows but input_ids has 0 image placeholder runs");
}

TEST(Qwen2_5_VLModel, MropeWithEqualAxesIsPlainRope) {
  auto inv_freq = rope_inv_freq(16, 10000.0, torch::kCPU);
  auto positions = torch::arange(0, 40, torch::kInt64).view({2, 20});
  auto plain = rope_cos_sin(inv_freq, positions, torch::kFloat32);
  auto multi = mrope_cos_sin(inv_freq, positions.unsqueeze(0).expand({3, 2, 20}), {2, 3, 3}, torch::kFloat32);
  EXPECT_TRUE(torch::equal(plain.cos, multi.cos));
  EXPECT_TRUE(torch::equal(plain.sin, multi.sin));
  // Different axes must change the bands they own: band 0 (temporal) is frequencies [0, 2).
  auto axes = positions.unsqueeze(0).repeat({3, 1, 1});
  axes[0].fill_(0);
  auto shifted = mrope_cos_sin(inv_freq, axes, {2, 3, 3}, torch::kFloat32);
  EXPECT_TRUE(torch::equal(shifted.cos.narrow(-1, 2, 6), plain.cos.narrow(-1, 2, 6)));
  EXPECT_FALSE(torch::equal(shifted.cos.narrow(-1, 0, 2), plain.cos.narrow(-1, 0, 2)));
}

TEST(Qwen2_5_VLModel, TrainingForwardHasGradients) {
  auto model = load("A");
  model->train();
  auto cases = cases_of("A");
  auto in = inputs_of(*cases, "text");
  auto logits = model->forward(in);
  auto labels = in.input_ids.narrow(1, 1, in.input_ids.size(1) - 1).reshape({-1});
  auto loss = torch::nn::functional::cross_entropy(
      logits.narrow(1, 0, logits.size(1) - 1).reshape({-1, logits.size(-1)}), labels);
  loss.backward();
  for (const auto& p : model->model->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0.0) << p.key();
  }
}

}  // namespace
}  // namespace mm::testing
