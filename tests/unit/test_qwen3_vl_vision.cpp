// Qwen3-VL vision tower against transformers' Qwen3VLVisionModel (oracle:
// tests/reference/qwen3_vl_vision.py): the position-table taps, the merged tokens and the DeepStack
// features in fp32 and bf16, the gradients, weight loading and input checks.
#include <set>

#include "mm/core/json_config.h"
#include "mm/nn/weights.h"
#include "mm/models/qwen2_5_vl/qwen2_5_vl_vision_layout.h"
#include "mm/models/qwen3_vl/qwen3_vl_position_taps.h"
#include "mm/models/qwen3_vl/qwen3_vl_vision.h"
#include "mm/models/qwen3_vl/qwen3_vl_vision_config.h"
#include "testing.h"

namespace fs = std::filesystem;
using mm::testing::golden_dir;
using mm::testing::max_abs_diff;

namespace {

const std::vector<std::string> kConfigs = {"a", "b", "c"};

fs::path config_dir(const std::string& name) { return golden_dir("qwen3_vl_vision") / name; }

mm::Qwen3VLVisionConfig vision_config(const std::string& name) {
  const auto file = config_dir(name) / "config.json";
  return mm::Qwen3VLVisionConfig::from_json(mm::read_json_file(file).at("vision_config"), file.string());
}

const std::string kPrefix = "model.visual.";

std::string strip_prefix(const std::string& name) {
  return name.rfind(kPrefix, 0) == 0 ? name.substr(kPrefix.size()) : name;
}

void load(mm::Qwen3VLVisionModel& model, const fs::path& weights) {
  mm::WeightLoadOptions options;
  options.checkpoint_to_module = strip_prefix;
  mm::load_weights(*model, mm::Checkpoint::open(weights), options);
}

mm::Qwen3VLVisionModel loaded_model(const std::string& name) {
  mm::Qwen3VLVisionModel model(vision_config(name));
  load(model, config_dir(name) / "model.safetensors");
  model->eval();
  return model;
}

struct Case {
  std::shared_ptr<mm::SafetensorsFile> file;
  std::string prefix;
  bool has(const std::string& key) const { return file->contains(prefix + key); }
  torch::Tensor operator[](const std::string& key) const { return file->tensor(prefix + key); }
};

std::vector<Case> cases(const std::string& name) {
  std::shared_ptr<mm::SafetensorsFile> file = mm::SafetensorsFile::open(config_dir(name) / "cases.safetensors");
  std::vector<Case> out;
  for (int i = 0; file->contains("case" + std::to_string(i) + ".out"); ++i)
    out.push_back({file, "case" + std::to_string(i) + "."});
  EXPECT_FALSE(out.empty());
  return out;
}

std::string grid_text(const Case& c) { return c10::str(c["grid_thw"].view(-1)); }

}  // namespace

TEST(Qwen3VLPositionTaps, AreTheReferenceInterpolationBitForBit) {
  for (const auto& name : kConfigs) {
    const auto config = vision_config(name);
    for (const Case& c : cases(name)) {
      SCOPED_TRACE(name + " grid " + grid_text(c));
      const auto taps = mm::qwen3_vl_position_taps(mm::vision_grid_of(c["grid_thw"], "test"),
                                                   config.num_grid_per_side(), config.spatial_merge_size);
      EXPECT_TRUE(torch::equal(taps.indices, c["interp_indices"]));
      EXPECT_TRUE(torch::equal(taps.weights, c["interp_weights"]));
    }
  }
  EXPECT_EQ(vision_config("b").num_grid_per_side(), 7);  // 50 rows: int(50 ** 0.5)
}

TEST(Qwen3VLVisionModel, ParameterNamesAndShapesAreTheCheckpoints) {
  for (const auto& name : kConfigs) {
    const auto ckpt = mm::Checkpoint::open(config_dir(name) / "model.safetensors");
    mm::Qwen3VLVisionModel model(vision_config(name));
    std::set<std::string> module_names, checkpoint_names;
    for (const auto& [param, tensor] : mm::named_weights(*model)) {
      module_names.insert(param);
      ASSERT_TRUE(ckpt.contains(kPrefix + param)) << param;
      EXPECT_EQ(tensor.sizes(), at::IntArrayRef(ckpt.info(kPrefix + param).shape)) << param;
    }
    for (const auto& ckpt_name : ckpt.names()) checkpoint_names.insert(strip_prefix(ckpt_name));
    EXPECT_EQ(module_names, checkpoint_names) << name;
  }
  mm::Qwen3VLVisionModel model(vision_config("a"));
  EXPECT_EQ(model->patch_embed->proj->weight.sizes(), (std::vector<int64_t>{64, 3, 2, 16, 16}));
  EXPECT_EQ(model->patch_embed->proj->bias.sizes(), (std::vector<int64_t>{64}));
  EXPECT_EQ(model->deepstack_merger_list->size(), 2u);
  EXPECT_EQ(model->deepstack_merger_list->ptr<mm::Qwen3VLPatchMergerImpl>(0)->norm->weight.size(0), 256);
  EXPECT_EQ(model->merger->norm->weight.size(0), 64);
}

TEST(Qwen3VLVisionModel, MatchesTransformersInFp32) {
  torch::NoGradGuard no_grad;
  for (const auto& name : kConfigs) {
    auto model = loaded_model(name);
    const size_t deepstack = vision_config(name).deepstack_visual_indexes.size();
    double worst = 0;
    for (const Case& c : cases(name)) {
      SCOPED_TRACE(name + " grid " + grid_text(c));
      const auto out = model->features(c["pixel_values"], c["grid_thw"]);
      ASSERT_EQ(out.merged.scalar_type(), torch::kFloat);
      worst = std::max(worst, max_abs_diff(out.merged, c["out"]));
      ASSERT_EQ(out.deepstack.size(), deepstack);
      for (size_t k = 0; k < deepstack; ++k)
        worst = std::max(worst, max_abs_diff(out.deepstack[k], c["deepstack" + std::to_string(k)]));
      EXPECT_TRUE(torch::equal(model(c["pixel_values"], c["grid_thw"]), out.merged));
    }
    EXPECT_LE(worst, 2e-5) << name;
    std::cout << "config " << name << ": fp32 max abs diff " << worst << "\n";
  }
}

// On the CPU every operation is the reference's (the Conv3d patch embedding, the table rows
// weighted in fp32, LayerNorm, SDPA per frame), so bf16 agrees to the last bit.
TEST(Qwen3VLVisionModel, MatchesTransformersInBf16) {
  torch::NoGradGuard no_grad;
  auto model = loaded_model("a");
  model->to(torch::kBFloat16);
  double worst = 0, reference_error = 0;
  for (const Case& c : cases("a")) {
    SCOPED_TRACE("grid " + grid_text(c));
    const auto out = model->features(c["pixel_values"], c["grid_thw"]);
    ASSERT_EQ(out.merged.scalar_type(), torch::kBFloat16);
    worst = std::max(worst, max_abs_diff(out.merged, c["out_bf16"]));
    for (size_t k = 0; k < out.deepstack.size(); ++k)
      worst = std::max(worst, max_abs_diff(out.deepstack[k], c["deepstack" + std::to_string(k) + "_bf16"]));
    reference_error = std::max(reference_error, max_abs_diff(c["out_bf16"], c["out"]));
  }
  EXPECT_LE(worst, 1e-6);
  EXPECT_GT(reference_error, 1e-4);  // bf16 really ran: its error against fp32 is visible
  std::cout << "bf16 max abs diff " << worst << " (the reference's own bf16 error " << reference_error << ")\n";
}

TEST(Qwen3VLVisionModel, GradientsMatchTransformers) {
  auto model = loaded_model("a");
  const Case c = cases("a").front();
  ASSERT_TRUE(c.has("grad_pixel_values"));
  const torch::Tensor pixels = c["pixel_values"].clone().requires_grad_(true);
  const auto out = model->features(pixels, c["grid_thw"]);
  torch::Tensor loss = (out.merged * c["out_probe"]).sum();
  for (size_t k = 0; k < out.deepstack.size(); ++k)
    loss = loss + (out.deepstack[k] * c["deepstack" + std::to_string(k) + "_probe"]).sum();
  loss.backward();
  double worst = 0;
  for (const auto& p : model->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    const torch::Tensor want = c["grad." + p.key()];
    const double rel = max_abs_diff(p.value().grad(), want) / std::max(want.abs().max().item<double>(), 1e-12);
    EXPECT_LE(rel, 1e-5) << p.key();
    worst = std::max(worst, rel);
  }
  const torch::Tensor want_pixels = c["grad_pixel_values"];
  EXPECT_LE(max_abs_diff(pixels.grad(), want_pixels) / want_pixels.abs().max().item<double>(), 1e-5);
  // The table rows that no tap of this 4 x 4 grid reads get no gradient, the rest do.
  EXPECT_GT(model->pos_embed->weight.grad().abs().sum().item<double>(), 0);
  std::cout << "gradients: worst relative diff " << worst << "\n";
}

TEST(Qwen3VLVisionModel, WeightsWithAMissingOrMisshapedTensorAreRefusedByName) {
  const auto source = mm::Checkpoint::open(config_dir("a") / "model.safetensors");
  const auto dir = mm::testing::temp_dir("qwen3_vision_weights");
  std::vector<std::pair<std::string, torch::Tensor>> missing, misshaped;
  for (const auto& name : source.names()) {
    if (name != "model.visual.deepstack_merger_list.1.linear_fc1.bias") missing.emplace_back(name, source.tensor(name));
    misshaped.emplace_back(name, name == "model.visual.pos_embed.weight" ? torch::zeros({49, 64}) : source.tensor(name));
  }
  mm::save_safetensors(dir / "missing.safetensors", missing);
  mm::save_safetensors(dir / "misshaped.safetensors", misshaped);
  mm::Qwen3VLVisionModel model(vision_config("a"));
  EXPECT_THROW_MSG(load(model, dir / "missing.safetensors"), "missing: deepstack_merger_list.1.linear_fc1.bias");
  EXPECT_THROW_MSG(load(model, dir / "misshaped.safetensors"), "model.visual.pos_embed.weight is [49, 64], expected [36, 64]");
  fs::remove_all(dir);
}

TEST(Qwen3VLVisionModel, InvalidGridsAndConfigsAreRefusedWithClearErrors) {
  auto model = loaded_model("a");
  const int64_t patch_dim = 3 * 2 * 16 * 16;
  const auto grid = [](std::vector<int64_t> v) { return torch::tensor(v, torch::kLong).view({-1, 3}); };
  EXPECT_THROW_MSG(model(torch::randn({12, patch_dim}), grid({1, 3, 4})),
                   "grid_thw row 0 is (1, 3, 4); h and w must be divisible by spatial_merge_size 2");
  EXPECT_THROW_MSG(model(torch::randn({32, patch_dim}), grid({1, 4, 4, 1, 4, 6})),
                   "Qwen3-VL vision: grid_thw accounts for 40 patches (sum of t*h*w) but pixel_values has 32 rows");
  EXPECT_THROW_MSG(model(torch::randn({16, patch_dim}), grid({0, 4, 4})), "must be positive");
  EXPECT_THROW_MSG(model(torch::randn({16, patch_dim}), torch::tensor({1, 4, 4})), "grid_thw must be [num_items, 3]");
  EXPECT_THROW_MSG(model(torch::randn({16, 100}), grid({1, 4, 4})), "pixel_values must be [num_patches, 1536]");

  auto config_json = mm::read_json_file(config_dir("a") / "config.json").at("vision_config");
  auto refused = [&](const char* key, nlohmann::json value, const std::string& message) {
    auto broken = config_json;
    broken[key] = std::move(value);
    EXPECT_THROW_MSG(mm::Qwen3VLVisionConfig::from_json(broken, "config.json"), message);
  };
  refused("deepstack_visual_indexes", {0, 4}, "deepstack_visual_indexes has 4, outside [0, depth=4)");
  refused("deepstack_visual_indexes", {1, 1}, "deepstack_visual_indexes lists 1 twice");
  refused("num_position_embeddings", 0, "num_position_embeddings");
  refused("num_heads", 3, "hidden_size (64) must be divisible by num_heads (3)");
  refused("patch_size", {16, 16}, "config.json: vision_config.patch_size: has the wrong type");
  refused("rope_parameters", {{"rope_type", "default"}}, "rope_type: 'default' is not supported");
}
