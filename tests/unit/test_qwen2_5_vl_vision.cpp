// Qwen2.5-VL vision tower against transformers' Qwen2_5_VisionTransformerPretrainedModel
// (oracle: tests/reference/qwen2_5_vl_vision.py), plus its index layout, weight loading and
// input checks.
#include <set>

#include "mm/core/json_config.h"
#include "mm/nn/varlen_attention.h"
#include "mm/nn/weights.h"
#include "mm/models/qwen2_5_vl/qwen2_5_vl_vision_config.h"
#include "mm/models/qwen2_5_vl/qwen2_5_vl_vision.h"
#include "mm/models/qwen2_5_vl/qwen2_5_vl_vision_layout.h"
#include "testing.h"

namespace fs = std::filesystem;
using mm::testing::golden_dir;
using mm::testing::max_abs_diff;

namespace {

fs::path config_dir(const std::string& name) { return golden_dir("qwen2_5_vl_vision") / name; }

mm::Qwen2_5_VLVisionConfig vision_config(const std::string& name) {
  const auto file = config_dir(name) / "config.json";
  return mm::Qwen2_5_VLVisionConfig::from_json(mm::read_json_file(file).at("vision_config"), file.string());
}

std::string strip_visual(const std::string& name) {
  return name.rfind("visual.", 0) == 0 ? name.substr(7) : name;
}

void load(mm::Qwen2_5_VisionTransformer& model, const fs::path& weights) {
  mm::WeightLoadOptions options;
  options.checkpoint_to_module = strip_visual;
  mm::load_weights(*model, mm::Checkpoint::open(weights), options);
}

mm::Qwen2_5_VisionTransformer loaded_model(const std::string& name) {
  mm::Qwen2_5_VisionTransformer model(vision_config(name));
  load(model, config_dir(name) / "model.safetensors");
  model->eval();
  return model;
}

struct Case {
  torch::Tensor pixel_values, grid_thw, out, out_bf16, out_bf16_fused;
  torch::Tensor window_index, cu_seqlens, cu_window_seqlens, position_ids;
};

std::vector<Case> cases(const std::string& name) {
  auto file = mm::SafetensorsFile::open(config_dir(name) / "cases.safetensors");
  std::vector<Case> out;
  for (int i = 0;; ++i) {
    const std::string p = "case" + std::to_string(i) + ".";
    if (!file->contains(p + "out")) break;
    auto optional = [&](const std::string& key) {
      return file->contains(p + key) ? file->tensor(p + key) : torch::Tensor();
    };
    Case c{file->tensor(p + "pixel_values"), file->tensor(p + "grid_thw"), file->tensor(p + "out"),
           optional("out_bf16"), optional("out_bf16_fused"),
           file->tensor(p + "window_index"), file->tensor(p + "cu_seqlens"),
           file->tensor(p + "cu_window_seqlens"), file->tensor(p + "position_ids")};
    out.push_back(c);
  }
  EXPECT_FALSE(out.empty());
  return out;
}

std::vector<std::array<int64_t, 3>> grid_of(const torch::Tensor& grid_thw) {
  std::vector<std::array<int64_t, 3>> grid;
  for (int64_t i = 0; i < grid_thw.size(0); ++i)
    grid.push_back({grid_thw[i][0].item<int64_t>(), grid_thw[i][1].item<int64_t>(), grid_thw[i][2].item<int64_t>()});
  return grid;
}

torch::Tensor as_tensor(const std::vector<int64_t>& v) { return torch::tensor(v, torch::kLong); }

}  // namespace

TEST(Qwen2_5_VisionLayout, MatchesTheReferenceIndexHelpers) {
  for (const std::string name : {"a", "b"}) {
    const auto config = vision_config(name);
    for (const Case& c : cases(name)) {
      const auto layout = mm::qwen2_5_vision_layout(grid_of(c.grid_thw), config.spatial_merge_size,
                                                    config.window_size / config.spatial_merge_size / config.patch_size);
      SCOPED_TRACE(name + " grid " + c10::str(c.grid_thw.view(-1)));
      EXPECT_TRUE(torch::equal(as_tensor(layout.window_index), c.window_index));
      EXPECT_TRUE(torch::equal(as_tensor(layout.cu_seqlens), c.cu_seqlens));
      EXPECT_TRUE(torch::equal(as_tensor(layout.cu_window_seqlens), c.cu_window_seqlens));
      EXPECT_TRUE(torch::equal(as_tensor(layout.position_ids).view({-1, 2}), c.position_ids));
      EXPECT_EQ(layout.num_patches, c.pixel_values.size(0));
    }
  }
}

TEST(Qwen2_5_VisionTransformer, ParameterNamesAndShapesAreTheCheckpoints) {
  const auto ckpt = mm::Checkpoint::open(config_dir("a") / "model.safetensors");
  mm::Qwen2_5_VisionTransformer model(vision_config("a"));
  std::set<std::string> module_names, checkpoint_names;
  for (const auto& [name, tensor] : mm::named_weights(*model)) {
    module_names.insert(name);
    ASSERT_TRUE(ckpt.contains("visual." + name)) << name;
    EXPECT_EQ(tensor.sizes(), at::IntArrayRef(ckpt.info("visual." + name).shape)) << name;
  }
  for (const auto& name : ckpt.names()) checkpoint_names.insert(strip_visual(name));
  EXPECT_EQ(module_names, checkpoint_names);
  EXPECT_EQ(model->patch_embed->proj->weight.sizes(), (std::vector<int64_t>{64, 3, 2, 14, 14}));
  EXPECT_EQ(model->blocks->size(), 4u);
}

TEST(Qwen2_5_VisionTransformer, MatchesTransformersInFp32) {
  torch::NoGradGuard no_grad;
  for (const std::string name : {"a", "b"}) {
    auto model = loaded_model(name);
    double worst = 0;
    for (const Case& c : cases(name)) {
      const torch::Tensor out = model(c.pixel_values, c.grid_thw);
      ASSERT_EQ(out.scalar_type(), torch::kFloat);
      const double diff = max_abs_diff(out, c.out);
      EXPECT_LE(diff, 1e-4) << name << " grid " << c.grid_thw.view(-1);
      worst = std::max(worst, diff);
    }
    std::cout << "config " << name << ": fp32 max abs diff " << worst << "\n";
  }
}

// In bf16 the patch embedding decides how close we can be: on the CPU it is the reference's
// Conv3d and must agree with transformers' default path to the last bit; on CUDA (and in its CPU
// twin here, matmul_on_cpu) a matmul, which must agree to the last bit with transformers' fused
// patch embedding and be no further from fp32 than the Conv3d reference's own bf16 error allows.
TEST(Qwen2_5_VisionTransformer, MatchesTransformersInBf16) {
  torch::NoGradGuard no_grad;
  auto model = loaded_model("a");
  model->to(torch::kBFloat16);
  double worst_fused = 0, worst_conv = 0, reference_error = 0;
  for (const Case& c : cases("a")) {
    SCOPED_TRACE("grid " + c10::str(c.grid_thw.view(-1)));
    model->patch_embed->matmul_on_cpu = false;
    const torch::Tensor out = model(c.pixel_values, c.grid_thw);
    model->patch_embed->matmul_on_cpu = true;
    const torch::Tensor matmul_out = model(c.pixel_values, c.grid_thw);
    ASSERT_EQ(out.scalar_type(), torch::kBFloat16);
    const double conv = max_abs_diff(out, c.out_bf16);
    const double fused = max_abs_diff(matmul_out, c.out_bf16_fused);
    const double own_error = max_abs_diff(c.out_bf16, c.out);  // reference bf16 vs fp32
    EXPECT_LE(conv, 1e-6);
    EXPECT_LE(fused, 1e-6);
    EXPECT_LE(max_abs_diff(matmul_out, c.out), 1.25 * own_error);
    worst_fused = std::max(worst_fused, fused);
    worst_conv = std::max(worst_conv, conv);
    reference_error = std::max(reference_error, own_error);
  }
  std::cout << "bf16 max abs diff: " << worst_conv << " vs the Conv3d reference (CPU path), " << worst_fused
            << " vs the fused-patch-embedding reference (CUDA path's matmul), whose own bf16 error is "
            << reference_error << "\n";
}

TEST(Qwen2_5_VisionTransformer, GradientsReachEveryParameter) {
  auto model = loaded_model("b");
  model->train();
  const Case c = cases("b").front();
  model(c.pixel_values, c.grid_thw).pow(2).sum().backward();
  for (const auto& p : model->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0) << p.key();
  }
}

TEST(VarlenSegments, EqualsOneAttentionPerSegment) {
  torch::manual_seed(0);
  // Lengths 4, 2, 4, 4, 3, 2 (and an empty segment): scattered equal lengths are gathered.
  const std::vector<int64_t> cu = {0, 4, 6, 10, 14, 14, 17, 19};
  const mm::VarlenSegments segments(cu, torch::kCPU);
  EXPECT_EQ(segments.num_sdpa_calls(), 3u);
  const auto q = torch::randn({19, 2, 8}), k = torch::randn({19, 2, 8}), v = torch::randn({19, 2, 8});
  const auto got = segments.attention(q, k, v, 0.3);
  for (size_t i = 1; i < cu.size(); ++i) {
    const int64_t s = cu[i - 1], n = cu[i] - cu[i - 1];
    if (n == 0) continue;
    auto part = [&](const torch::Tensor& x) { return x.narrow(0, s, n).transpose(0, 1); };
    const auto want = at::scaled_dot_product_attention(part(q), part(k), part(v), {}, 0.0, false, 0.3).transpose(0, 1);
    EXPECT_LE(max_abs_diff(got.narrow(0, s, n), want), 1e-6) << "segment " << i;
  }
}

TEST(Qwen2_5_VisionTransformer, WeightsWithAMissingOrMisshapedTensorAreRefusedByName) {
  const auto source = mm::Checkpoint::open(config_dir("a") / "model.safetensors");
  const auto dir = mm::testing::temp_dir("qwen_vision_weights");
  std::vector<std::pair<std::string, torch::Tensor>> missing, misshaped;
  for (const auto& name : source.names()) {
    if (name != "visual.blocks.2.mlp.up_proj.bias") missing.emplace_back(name, source.tensor(name));
    misshaped.emplace_back(name, name == "visual.merger.mlp.0.weight" ? torch::zeros({256, 255})
                                                                       : source.tensor(name));
  }
  mm::save_safetensors(dir / "missing.safetensors", missing);
  mm::save_safetensors(dir / "misshaped.safetensors", misshaped);
  mm::Qwen2_5_VisionTransformer model(vision_config("a"));
  EXPECT_THROW_MSG(load(model, dir / "missing.safetensors"), "missing: blocks.2.mlp.up_proj.bias");
  EXPECT_THROW_MSG(load(model, dir / "misshaped.safetensors"),
                   "visual.merger.mlp.0.weight is [256, 255], expected [256, 256]");
  fs::remove_all(dir);
}

TEST(Qwen2_5_VisionTransformer, InvalidGridsAreRefusedWithClearErrors) {
  auto model = loaded_model("a");
  const int64_t patch_dim = 3 * 2 * 14 * 14;
  const auto grid = [](std::vector<int64_t> v) { return torch::tensor(v, torch::kLong).view({-1, 3}); };
  EXPECT_THROW_MSG(model(torch::randn({12, patch_dim}), grid({1, 3, 4})),
                   "grid_thw row 0 is (1, 3, 4); h and w must be divisible by spatial_merge_size 2");
  EXPECT_THROW_MSG(model(torch::randn({32, patch_dim}), grid({1, 4, 4, 1, 4, 6})),
                   "grid_thw accounts for 40 patches (sum of t*h*w) but pixel_values has 32 rows");
  EXPECT_THROW_MSG(model(torch::randn({16, patch_dim}), grid({0, 4, 4})), "must be positive");
  EXPECT_THROW_MSG(model(torch::randn({16, patch_dim}), torch::tensor({1, 4, 4})), "grid_thw must be [num_items, 3]");
  EXPECT_THROW_MSG(model(torch::randn({16, patch_dim}), torch::tensor({{1.0, 4.0, 4.0}})), "integer tensor");
  EXPECT_THROW_MSG(model(torch::randn({16, 100}), grid({1, 4, 4})), "pixel_values must be [num_patches, 1176]");
}
