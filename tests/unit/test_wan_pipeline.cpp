// Whole text-to-video samples against diffusers' WanPipeline on tiny random pipelines: the prompt
// embeddings (tokenizer + umT5 + the pipeline's zeroing) within 1e-4, and the final latents and the
// decoded video of a 4-step sample from the same seed within 1e-3, for the Wan2.1 layout (UniPC,
// classifier-free guidance, two prompts), the flow-match Euler sampler without guidance, the
// Wan2.2 A14B two-expert layout (boundary_ratio, guidance_2) and the Wan2.2 TI2V layout (Wan2.2
// VAE, per-token timesteps). Broken pipelines and options are refused by name.
#include <fstream>

#include "mm/core/json_config.h"
#include "mm/core/safetensors.h"
#include "mm/models/wan/wan_pipeline.h"
#include "mm/tasks/video_sampling.h"
#include "testing.h"

namespace mm {
namespace {

namespace fs = std::filesystem;
using testing::golden_dir;
using testing::max_abs_diff;

class WanPipelineParity : public ::testing::TestWithParam<std::string> {};

TEST_P(WanPipelineParity, SampleEqualsDiffusers) {
  const auto dir = golden_dir("wan_pipeline") / GetParam();
  auto model = WanModel::from_pretrained(dir / "pipeline");
  const auto golden = Checkpoint::open(dir / "cases.safetensors");
  const auto prompts_json = read_json_file(dir / "prompts.json");
  const auto prompts = prompts_json.at("prompts").get<std::vector<std::string>>();
  const auto settings = golden.tensor("settings");
  const auto guidance = golden.tensor("guidance");

  VideoSamplingOptions options;
  options.frames = settings[0].item<int64_t>();
  options.height = settings[1].item<int64_t>();
  options.width = settings[2].item<int64_t>();
  options.steps = settings[3].item<int64_t>();
  options.seed = static_cast<uint64_t>(settings[4].item<int64_t>());
  options.max_sequence_length = settings[5].item<int64_t>();
  options.guidance = guidance[0].item<double>();
  if (model->guidance_switches()) options.guidance_2 = guidance[1].item<double>();
  options.negative_prompt = prompts_json.at("negative_prompt").get<std::string>();

  const auto embeds = model->encode_prompts(prompts, options.max_sequence_length);
  const double embed_diff = max_abs_diff(embeds, golden.tensor("prompt_embeds"));
  EXPECT_LT(embed_diff, 1e-4);
  const auto negative = model->encode_prompts(std::vector<std::string>(prompts.size(), options.negative_prompt),
                                              options.max_sequence_length);
  EXPECT_LT(max_abs_diff(negative, golden.tensor("negative_prompt_embeds")), 1e-4);

  const auto sample = sample_text_to_video(*model, prompts, options);
  const double latent_diff = max_abs_diff(sample.latents, golden.tensor("latents"));
  EXPECT_LT(latent_diff, 1e-3);
  const auto expected = golden.tensor("video");  // [B, F, H, W, 3]
  const auto video = sample.video.permute({0, 2, 3, 4, 1});
  ASSERT_EQ(video.sizes(), expected.sizes());
  const double video_diff = max_abs_diff(video, expected);
  EXPECT_LT(video_diff, 1e-3);
  std::cout << GetParam() << ": max |ours - diffusers|: prompt embeddings " << embed_diff << ", latents "
            << latent_diff << ", video " << video_diff << " (video values up to " << expected.abs().max().item<double>() << ")\n";
}

INSTANTIATE_TEST_SUITE_P(Layouts, WanPipelineParity, ::testing::Values("unipc_cfg", "euler", "two_experts", "ti2v"));

TEST(WanPipeline, FramesAsExportToVideoWritesThem) {
  const auto video = torch::tensor({0.0f, 0.5f, 0.999f, 1.0f}).view({1, 4, 1, 1}).expand({3, 4, 1, 1});
  const auto frames = video_to_uint8_frames(video);
  EXPECT_EQ(frames.sizes(), (std::vector<int64_t>{4, 1, 1, 3}));
  EXPECT_EQ(frames[1][0][0][0].item<uint8_t>(), 127);  // truncated, as (x * 255).astype(uint8)
  EXPECT_EQ(frames[2][0][0][0].item<uint8_t>(), 254);
  EXPECT_EQ(frames[3][0][0][0].item<uint8_t>(), 255);
}

TEST(WanPipeline, BrokenPipelinesAndOptionsAreNamed) {
  const auto source = golden_dir("wan_pipeline") / "euler" / "pipeline";
  const auto dir = testing::temp_dir("wan_pipeline_bad");
  EXPECT_THROW_MSG(WanModel::from_pretrained(dir / "nothing"), "no model_index.json");

  const auto copy = dir / "copy";
  fs::remove_all(copy);
  fs::copy(source, copy, fs::copy_options::recursive);
  auto index = read_json_file(copy / "model_index.json");
  index["_class_name"] = "WanImageToVideoPipeline";
  std::ofstream(copy / "model_index.json") << index.dump();
  EXPECT_THROW_MSG(WanModel::from_pretrained(copy), "_class_name: 'WanImageToVideoPipeline'");
  index["_class_name"] = "WanPipeline";
  index["boundary_ratio"] = 0.5;
  std::ofstream(copy / "model_index.json") << index.dump();
  EXPECT_THROW_MSG(WanModel::from_pretrained(copy), "boundary_ratio is set but there is no transformer_2");
  index["boundary_ratio"] = nullptr;
  std::ofstream(copy / "model_index.json") << index.dump();
  fs::remove_all(copy / "vae");
  EXPECT_THROW_MSG(WanModel::from_pretrained(copy), "missing the vae/ folder");

  auto model = WanModel::from_pretrained(source);
  VideoSamplingOptions options;
  options.frames = 5;
  options.height = 24;
  options.width = 32;
  options.steps = 1;
  EXPECT_THROW_MSG(sample_text_to_video(*model, {"x"}, options), "--size: the height must be a positive multiple of 16");
  options.height = 32;
  options.steps = 0;
  EXPECT_THROW_MSG(sample_text_to_video(*model, {"x"}, options), "--steps: must be at least 1");
  options.steps = 1;
  EXPECT_THROW_MSG(sample_text_to_video(*model, {}, options), "at least one prompt");
}

}  // namespace
}  // namespace mm
