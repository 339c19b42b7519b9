// The Wan causal 3D VAE against diffusers' AutoencoderKLWan on tiny random weights (fp32), for a
// Wan2.1-like config ("a") and a Wan2.2-like one ("b": residual blocks, patch_size 2,
// decoder_base_dim): posterior mean/logvar of a 3-chunk video and of an image, decoded videos and
// images, tiled encode/decode with several blended tiles, all within 1e-4; posterior sampling
// with a seeded generator and the pipelines' latent normalization equal; sharded checkpoints load;
// broken configs, checkpoints and inputs are refused by name.
#include <ATen/CPUGeneratorImpl.h>

#include <fstream>

#include "mm/core/json_config.h"
#include "mm/core/safetensors.h"
#include "mm/models/wan/wan_vae.h"
#include "mm/nn/weights.h"
#include "testing.h"

namespace mm {
namespace {

namespace fs = std::filesystem;
using testing::golden_dir;
using testing::max_abs_diff;

constexpr double kTolerance = 1e-4;

// The tiny convolutions gain nothing from threads, and on a loaded two-core machine OpenMP's
// waiting makes the many-tile cases tens of times slower; the oracle runs single-threaded too.
class SingleThreaded : public ::testing::Environment {
 public:
  void SetUp() override { torch::set_num_threads(1); }
};
const auto* const kSingleThreaded = ::testing::AddGlobalTestEnvironment(new SingleThreaded);

WanVAETiling tiling_of(const Checkpoint& cases) {
  const auto t = cases.tensor("tiling");
  return {t[0].item<int64_t>(), t[1].item<int64_t>(), t[2].item<int64_t>(), t[3].item<int64_t>()};
}

// Asserts and prints max |ours - diffusers|; returns 1 to count the comparison.
int expect_close(const std::string& what, const torch::Tensor& ours, const torch::Tensor& expected) {
  const double diff = max_abs_diff(ours, expected);
  EXPECT_LT(diff, kTolerance) << what;
  std::cout << what << ": max |ours - diffusers| = " << diff << " (values up to " << expected.abs().max().item<double>()
            << ", shape " << expected.sizes() << ")\n";
  return 1;
}

class WanVAEParity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = golden_dir("wan_vae") / GetParam();
    vae_ = WanVAEImpl::from_pretrained(dir_ / "model");
  }
  Checkpoint cases() const { return Checkpoint::open(dir_ / "cases.safetensors"); }
  fs::path dir_;
  std::shared_ptr<WanVAEImpl> vae_;
};

TEST_P(WanVAEParity, EncodeMatchesDiffusers) {
  const auto c = cases();
  torch::NoGradGuard no_grad;
  int compared = 0;
  for (const std::string name : {"enc_video", "enc_image"}) {
    const auto dist = vae_->encode(c.tensor(name + ".x"));
    compared += expect_close(GetParam() + " " + name + ".mean", dist.mean, c.tensor(name + ".mean"));
    compared += expect_close(GetParam() + " " + name + ".logvar", dist.logvar, c.tensor(name + ".logvar"));
    EXPECT_TRUE(torch::equal(dist.mode(), dist.mean));
  }
  EXPECT_EQ(compared, 4);
}

TEST_P(WanVAEParity, DecodeMatchesDiffusers) {
  const auto c = cases();
  torch::NoGradGuard no_grad;
  int compared = 0;
  for (const std::string name : {"dec_video", "dec_image"}) {
    const auto z = c.tensor(name + ".z");
    const auto out = vae_->decode(z);
    compared += expect_close(GetParam() + " " + name, out, c.tensor(name + ".out"));
    EXPECT_EQ(out.size(2), 1 + (z.size(2) - 1) * vae_->config().temporal_compression());
  }
  EXPECT_EQ(compared, 2);
}

TEST_P(WanVAEParity, TiledEncodeAndDecodeMatchDiffusers) {
  const auto c = cases();
  const auto tiling = tiling_of(c);
  torch::NoGradGuard no_grad;
  const auto dist = vae_->tiled_encode(c.tensor("tiled_enc.x"), tiling);
  int compared = expect_close(GetParam() + " tiled_enc.mean", dist.mean, c.tensor("tiled_enc.mean"));
  compared += expect_close(GetParam() + " tiled_enc.logvar", dist.logvar, c.tensor("tiled_enc.logvar"));
  const auto z = c.tensor("tiled_dec.z");
  const auto out = vae_->tiled_decode(z, tiling);
  compared += expect_close(GetParam() + " tiled_dec", out, c.tensor("tiled_dec.out"));
  EXPECT_EQ(compared, 3);
  // The blended tiles differ from the whole-frame decode, so the tiles really were cut.
  const double seam = max_abs_diff(vae_->decode(z), out);
  std::cout << GetParam() << " tiled vs whole-frame decode differ by " << seam << "\n";
  EXPECT_GT(seam, 1e-3);
  // Inputs that fit in one tile take the whole-frame path, as in diffusers.
  const auto small = c.tensor("dec_image.z");
  WanVAETiling large;
  EXPECT_TRUE(torch::equal(vae_->tiled_decode(small, large), vae_->decode(small)));
  const auto image = c.tensor("enc_image.x");
  EXPECT_TRUE(torch::equal(vae_->tiled_encode(image, large).mean, vae_->encode(image).mean));
}

TEST_P(WanVAEParity, SampleAndLatentNormalizationMatchDiffusers) {
  const auto c = cases();
  torch::NoGradGuard no_grad;
  const auto dist = vae_->encode(c.tensor("enc_video.x"));
  const auto seed = static_cast<uint64_t>(c.tensor("sample.seed")[0].item<int64_t>());
  const auto sample = dist.sample(at::detail::createCPUGenerator(seed));
  expect_close(GetParam() + " sample", sample, c.tensor("sample.out"));
  // The pipelines' formulas on the same inputs: bit-equal.
  EXPECT_TRUE(torch::equal(vae_->normalize_latents(c.tensor("enc_video.mean")), c.tensor("norm.out")));
  EXPECT_TRUE(torch::equal(vae_->denormalize_latents(c.tensor("dec_video.z")), c.tensor("denorm.out")));
  const auto z = c.tensor("dec_video.z");
  EXPECT_LT(max_abs_diff(vae_->normalize_latents(vae_->denormalize_latents(z)), z), 1e-5);
}

TEST_P(WanVAEParity, ShardedCheckpointLoadsTheSameWeights) {
  const auto sharded = WanVAEImpl::from_pretrained(dir_ / "sharded");
  ASSERT_TRUE(fs::exists(dir_ / "sharded" / "diffusion_pytorch_model.safetensors.index.json"));
  const auto expected = named_weights(*vae_);
  const auto got = named_weights(*sharded);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, expected[i].first);
    EXPECT_TRUE(torch::equal(got[i].second, expected[i].second)) << got[i].first;
  }
}

TEST_P(WanVAEParity, Bfloat16RunsCloseToFp32) {
  // bf16 weights and activations (RMS norm and upsampling computed in fp32, as diffusers does):
  // a loose bound against the fp32 reference, since bf16 keeps 8 bits of mantissa.
  const auto bf16 = WanVAEImpl::from_pretrained(dir_ / "model", torch::kBFloat16);
  const auto c = cases();
  torch::NoGradGuard no_grad;
  const auto mean = bf16->encode(c.tensor("enc_video.x").to(torch::kBFloat16)).mean;
  const auto out = bf16->decode(c.tensor("dec_video.z").to(torch::kBFloat16));
  EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
  const double mean_diff = max_abs_diff(mean, c.tensor("enc_video.mean"));
  const double out_diff = max_abs_diff(out, c.tensor("dec_video.out"));
  std::cout << GetParam() << " bf16: max |mean - fp32 diffusers| = " << mean_diff
            << ", max |decoded - fp32 diffusers| = " << out_diff << "\n";
  EXPECT_LT(mean_diff, 0.05);
  EXPECT_LT(out_diff, 0.05);
}

INSTANTIATE_TEST_SUITE_P(Configs, WanVAEParity, ::testing::Values("a", "b"));

TEST(WanVAEConfig, ReadsDiffusersFieldsAndDefaults) {
  const auto a = WanVAEConfig::from_file(golden_dir("wan_vae") / "a" / "model" / "config.json");
  EXPECT_EQ(a.base_dim, 8);
  EXPECT_EQ(a.decoder_base_dim, 8);  // null -> base_dim
  EXPECT_EQ(a.z_dim, 4);
  EXPECT_EQ(a.patch_size, 1);  // null
  EXPECT_EQ(a.spatial_compression(), 8);
  EXPECT_EQ(a.temporal_compression(), 4);
  const auto b = WanVAEConfig::from_file(golden_dir("wan_vae") / "b" / "model" / "config.json");
  EXPECT_TRUE(b.is_residual);
  EXPECT_EQ(b.decoder_base_dim, 12);
  EXPECT_EQ(b.patch_size, 2);
  EXPECT_EQ(b.spatial_compression(), 16);
  EXPECT_EQ(b.video_channels(), 3);
  EXPECT_EQ(b.latents_std.size(), 6u);
  // An empty config is diffusers' default: the Wan2.1 VAE.
  const auto defaults = WanVAEConfig::from_json(nlohmann::json::object(), "empty");
  EXPECT_EQ(defaults.base_dim, 96);
  EXPECT_EQ(defaults.z_dim, 16);
  EXPECT_EQ(defaults.latents_mean.size(), 16u);
  EXPECT_EQ(defaults.spatial_compression(), 8);
}

TEST(WanVAEErrors, BadConfigFieldsAreNamed) {
  const auto base = read_json_file(golden_dir("wan_vae") / "b" / "model" / "config.json");
  int checked = 0;
  auto expect_field = [&](const std::string& key, const nlohmann::json& value, const std::string& message) {
    auto json = base;
    json[key] = value;
    EXPECT_THROW_MSG(WanVAEConfig::from_json(json, "vae/config.json"), message);
    ++checked;
  };
  expect_field("_class_name", "AutoencoderKL", "_class_name: 'AutoencoderKL' is not a Wan VAE");
  expect_field("dim_mult", nlohmann::json::array({1, 0, 4, 4}), "dim_mult has a non-positive entry");
  expect_field("temperal_downsample", nlohmann::json::array({true, true}), "temperal_downsample has 2 entries");
  expect_field("latents_std", nlohmann::json::array({1.0, 2.0}), "latents_std has 2 entries, expected z_dim = 6");
  expect_field("latents_mean", nlohmann::json::array({1.0}), "latents_mean has 1 entries");
  expect_field("scale_factor_spatial", 8, "scale_factor_spatial=8 disagrees with the architecture");
  expect_field("scale_factor_temporal", 8, "scale_factor_temporal=8 disagrees");
  expect_field("in_channels", 3, "in_channels=3 must be a positive multiple of patch_size^2 = 4");
  expect_field("attn_scales", nlohmann::json::array({1.0}), "attn_scales: must be empty");
  expect_field("is_residual", "yes", "is_residual: has the wrong type");
  expect_field("num_res_blocks", 0, "num_res_blocks=0");
  expect_field("dim_mult", nlohmann::json::array({1, 3, 4, 4}), "encoder level 1 maps 8 to 24 channels");
  expect_field("base_dim", 1000000, "3D convolutions of up to");  // bounded by memory before anything is built
  EXPECT_EQ(checked, 13);
}

TEST(WanVAEErrors, MissingExtraAndMisShapedTensorsAreNamed) {
  const auto source = golden_dir("wan_vae") / "a" / "model";
  const auto checkpoint = Checkpoint::open(source / "diffusion_pytorch_model.safetensors");
  const auto dir = testing::temp_dir("wan_vae_bad");
  auto write = [&](const std::string& name, const std::string& drop, const std::string& reshape,
                   const std::string& add) {
    fs::create_directories(dir / name);
    fs::copy_file(source / "config.json", dir / name / "config.json");
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const auto& n : checkpoint.names()) {
      if (n == drop) continue;
      tensors.emplace_back(n, n == reshape ? torch::zeros({3, 3}) : checkpoint.tensor(n));
    }
    if (!add.empty()) tensors.emplace_back(add, torch::zeros({2}));
    save_safetensors(dir / name / "diffusion_pytorch_model.safetensors", tensors);
    return dir / name;
  };
  const std::string dropped = "decoder.up_blocks.1.resnets.0.conv_shortcut.bias";
  EXPECT_THROW_MSG(WanVAEImpl::from_pretrained(write("missing", dropped, "", "")), "missing: " + dropped);
  EXPECT_THROW_MSG(WanVAEImpl::from_pretrained(write("shape", "", "encoder.mid_block.attentions.0.norm.gamma", "")),
                   "wrong shape: encoder.mid_block.attentions.0.norm.gamma is [3, 3], expected [32, 1, 1]");
  EXPECT_THROW_MSG(WanVAEImpl::from_pretrained(write("extra", "", "", "encoder.down_blocks.0.extra")),
                   "unexpected: encoder.down_blocks.0.extra");
  // A Wan2.2 config over Wan2.1 weights: the residual blocks' names and widths do not match.
  fs::create_directories(dir / "arch");
  fs::copy_file(source / "diffusion_pytorch_model.safetensors", dir / "arch" / "diffusion_pytorch_model.safetensors");
  fs::copy_file(golden_dir("wan_vae") / "b" / "model" / "config.json", dir / "arch" / "config.json");
  EXPECT_THROW_MSG(WanVAEImpl::from_pretrained(dir / "arch"), "does not match the model");
  fs::remove_all(dir);
}

TEST(WanVAEErrors, BadInputShapesSayWhatIsExpected) {
  const auto vae = WanVAEImpl::from_pretrained(golden_dir("wan_vae") / "b" / "model");
  torch::NoGradGuard no_grad;
  EXPECT_THROW_MSG(vae->encode(torch::zeros({1, 12, 1, 32, 32})), "expected a video [B, 3, F, H, W]");
  EXPECT_THROW_MSG(vae->encode(torch::zeros({1, 3, 32, 32})), "expected a video [B, 3, F, H, W]");
  EXPECT_THROW_MSG(vae->encode(torch::zeros({1, 3, 6, 32, 32})), "6 frames; expected 1 + 4k");
  EXPECT_THROW_MSG(vae->encode(torch::zeros({1, 3, 1, 24, 32})),
                   "height 24 and width 32 must be positive multiples of the spatial compression 16");
  EXPECT_THROW_MSG(vae->decode(torch::zeros({1, 4, 1, 2, 2})), "expected latents [B, z_dim = 6");
  WanVAETiling odd;
  odd.tile_sample_min_width = 40;
  EXPECT_THROW_MSG(vae->tiled_decode(torch::zeros({1, 6, 1, 2, 2}), odd), "tile_sample_{min,stride}_width: min 40");
  WanVAETiling wide;
  wide.tile_sample_stride_height = 512;
  EXPECT_THROW_MSG(vae->tiled_encode(torch::zeros({1, 3, 1, 32, 32}), wide), "with stride <= min");
  EXPECT_THROW_MSG(vae->normalize_latents(torch::zeros({1, 16, 1, 2, 2})), "expected [B, z_dim = 6");
}

}  // namespace
}  // namespace mm
