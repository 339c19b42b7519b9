// Whole image-to-video samples against diffusers' WanImageToVideoPipeline on tiny random
// pipelines (tests/reference/wan_i2v_pipeline.py): the preprocessed image (PIL Lanczos resize,
// [-1, 1]), the CLIP image tokens and the latent condition within 1e-4, and the final latents and
// the decoded video of a 4-step sample from the same seed and image within 1e-3, for Wan2.1-I2V
// (CLIP tokens, mask + image latent channels, guidance, two prompts), Wan2.1 FLF2V (first and last
// frame), Wan2.2 A14B I2V (two experts, no CLIP) and Wan2.2 TI2V (expand_timesteps). Then
// `mmtrain infer t2v --image` (and `infer i2v`) writes an mp4 of the right frames and size, and wrong pipelines and
// inputs are refused by name.
#include <fstream>

#include "mm/core/json_config.h"
#include "mm/core/safetensors.h"
#include "mm/media/image_decode.h"
#include "mm/models/wan/wan_pipeline.h"
#include "mm/tasks/video_sampling.h"
#include "testing.h"

namespace mm {
namespace {

namespace fs = std::filesystem;
using testing::golden_dir;
using testing::kMmtrain;
using testing::max_abs_diff;
using testing::run_command;

fs::path case_dir(const std::string& name) { return golden_dir("wan_i2v_pipeline") / name; }

// The TI2V case's pipeline relabelled as a text-to-video WanPipeline (its transformer takes z
// channels, as a Wan2.2 TI2V text-to-video one does).
fs::path text_to_video_pipeline() {
  static const fs::path dir = [] {
    const auto d = testing::temp_dir("wan_i2v_as_t2v") / "pipeline";
    fs::copy(case_dir("ti2v") / "pipeline", d, fs::copy_options::recursive);
    auto index = read_json_file(d / "model_index.json");
    index["_class_name"] = "WanPipeline";
    std::ofstream(d / "model_index.json") << index.dump();
    return d;
  }();
  return dir;
}

VideoSamplingOptions options_of(const Checkpoint& golden, const nlohmann::json& prompts_json, const WanModel& model) {
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
  if (model.guidance_switches()) options.guidance_2 = guidance[1].item<double>();
  options.negative_prompt = prompts_json.at("negative_prompt").get<std::string>();
  return options;
}

class WanI2VParity : public ::testing::TestWithParam<std::string> {};

TEST_P(WanI2VParity, SampleEqualsDiffusers) {
  const auto dir = case_dir(GetParam());
  auto model = WanModel::from_pretrained(dir / "pipeline");
  ASSERT_TRUE(model->config.image_to_video());
  const auto golden = Checkpoint::open(dir / "cases.safetensors");
  const auto prompts_json = read_json_file(dir / "prompts.json");
  const auto prompts = prompts_json.at("prompts").get<std::vector<std::string>>();
  const auto options = options_of(golden, prompts_json, *model);
  const auto image = decode_image(dir / "image.png");
  const auto last = fs::exists(dir / "last.png") ? decode_image(dir / "last.png") : at::Tensor();

  const auto conditioning =
      prepare_image_conditioning(*model, image, last, static_cast<int64_t>(prompts.size()), options);
  const double image_diff = max_abs_diff(conditioning.image, golden.tensor("image_tensor"));
  EXPECT_LT(image_diff, 1e-6);  // the same bytes after the resize: only float rounding
  if (last.defined()) {
    EXPECT_LT(max_abs_diff(conditioning.last_image, golden.tensor("last_tensor")), 1e-6);
  }
  double embeds_diff = -1;  // -1: the layout has no CLIP tokens
  if (golden.contains("image_embeds")) {
    ASSERT_TRUE(conditioning.image_embeds.defined());
    embeds_diff = max_abs_diff(conditioning.image_embeds, golden.tensor("image_embeds"));
    EXPECT_LT(embeds_diff, 1e-4);
  } else {
    EXPECT_FALSE(conditioning.image_embeds.defined());
  }
  const double condition_diff = max_abs_diff(conditioning.condition, golden.tensor("condition"));
  EXPECT_LT(condition_diff, 1e-4);

  const auto sample = sample_image_to_video(*model, prompts, image, options, last);
  const double latent_diff = max_abs_diff(sample.latents, golden.tensor("latents"));
  EXPECT_LT(latent_diff, 1e-3);
  const auto expected = golden.tensor("video");  // [B, F, H, W, 3]
  const auto video = sample.video.permute({0, 2, 3, 4, 1});
  ASSERT_EQ(video.sizes(), expected.sizes());
  const double video_diff = max_abs_diff(video, expected);
  EXPECT_LT(video_diff, 1e-3);
  std::cout << GetParam() << ": max |ours - diffusers|: image " << image_diff << ", image embeddings " << embeds_diff
            << ", condition " << condition_diff << ", latents " << latent_diff << ", video " << video_diff
            << " (latents up to " << golden.tensor("latents").abs().max().item<double>() << ")\n";
}

INSTANTIATE_TEST_SUITE_P(Layouts, WanI2VParity, ::testing::Values("wan21", "flf2v", "two_experts", "ti2v"));

TEST(WanI2V, LanczosResizeKeepsSizeAndConstants) {
  // A constant image stays constant (the weights sum to 1 in fixed point), and same size is a copy.
  const auto flat = torch::full({7, 9, 3}, 200, torch::kByte);
  const auto down = resize_lanczos_like_pil(flat, 3, 4);
  EXPECT_EQ(down.sizes(), (std::vector<int64_t>{3, 4, 3}));
  EXPECT_TRUE(down.eq(200).all().item<bool>());
  const auto up = resize_lanczos_like_pil(flat, 20, 30);
  EXPECT_TRUE(up.eq(200).all().item<bool>());
  const auto same = resize_lanczos_like_pil(flat, 7, 9);
  EXPECT_TRUE(same.equal(flat));
  EXPECT_THROW_MSG(resize_lanczos_like_pil(torch::zeros({4, 4}, torch::kByte), 2, 2), "uint8 [height, width, 3]");
}

TEST(WanI2V, CliWritesVideoFromImage) {
  const auto dir = testing::temp_dir("wan_i2v_cli");
  const auto mp4 = dir / "i2v.mp4";
  const auto pipeline = case_dir("wan21") / "pipeline";
  auto [status, out] = run_command(kMmtrain + " infer t2v --model " + pipeline.string() + " --image " +
                                   (case_dir("wan21") / "image.png").string() +
                                   " --prompt 'a red circle' --frames 9 --size 48x32 --steps 2 --guidance 3 "
                                   "--seed 1 --max-sequence-length 512 -o " + mp4.string());
  ASSERT_EQ(status, 0) << out;
  auto [s2, probe] = run_command("ffprobe -v error -count_frames -select_streams v:0 -show_entries "
                                 "stream=nb_read_frames,width,height -of json " + mp4.string(), false);
  ASSERT_EQ(s2, 0) << probe;
  const auto stream = nlohmann::json::parse(probe).at("streams").at(0);
  EXPECT_EQ(stream.at("nb_read_frames").get<std::string>(), "9");
  EXPECT_EQ(stream.at("width").get<int>(), 48);
  EXPECT_EQ(stream.at("height").get<int>(), 32);

  // TI2V (expand_timesteps, a WanPipeline that takes an image) from the CLI too, through `infer i2v`
  // (infer t2v with --image required).
  const auto ti2v = dir / "ti2v.mp4";
  auto [s3, o3] = run_command(kMmtrain + " infer i2v --model " + (case_dir("ti2v") / "pipeline").string() +
                              " --image " + (case_dir("ti2v") / "image.png").string() +
                              " --prompt 'a yellow shape' --frames 5 --size 64x64 --steps 2 -o " + ti2v.string());
  ASSERT_EQ(s3, 0) << o3;
  EXPECT_TRUE(fs::is_regular_file(ti2v));

  // An image-to-video pipeline without --image, and --image with a text-to-video pipeline.
  auto [s4, o4] = run_command(kMmtrain + " infer t2v --model " + pipeline.string() +
                              " --prompt x --frames 5 --size 48x32 --steps 1 -o " + (dir / "x.mp4").string());
  EXPECT_NE(s4, 0);
  EXPECT_NE(o4.find("--image: required"), std::string::npos) << o4;
  EXPECT_NE(o4.find("WanImageToVideoPipeline"), std::string::npos) << o4;
  auto [s5, o5] = run_command(kMmtrain + " infer t2v --model " + text_to_video_pipeline().string() + " --image " +
                              (case_dir("wan21") / "image.png").string() +
                              " --prompt x --frames 5 --size 64x64 --steps 1 -o " + (dir / "y.mp4").string());
  EXPECT_NE(s5, 0);
  EXPECT_NE(o5.find("is a WanPipeline (text to video)"), std::string::npos) << o5;
  auto [s6, o6] = run_command(kMmtrain + " infer i2v --model " + pipeline.string() + " --prompt x -o " +
                              (dir / "z.mp4").string());
  EXPECT_EQ(s6, 2) << o6;  // a usage error, before anything loads
  EXPECT_NE(o6.find("--image is required"), std::string::npos) << o6;
  // The chat command given this pipeline names the command that runs it.
  auto [s7, o7] = run_command(kMmtrain + " infer --model " + pipeline.string() + " --prompt x");
  EXPECT_EQ(s7, 1) << o7;
  EXPECT_NE(o7.find("is an image-to-video model"), std::string::npos) << o7;
  EXPECT_NE(o7.find("use mmtrain infer i2v"), std::string::npos) << o7;
}

TEST(WanI2V, BrokenPipelinesAndInputsAreNamed) {
  const auto source = case_dir("wan21") / "pipeline";
  const auto dir = testing::temp_dir("wan_i2v_bad");
  auto model = WanModel::from_pretrained(source);
  ASSERT_TRUE(model->has_image_encoder());
  VideoSamplingOptions options;
  options.frames = 5;
  options.height = 32;
  options.width = 32;
  options.steps = 1;
  options.max_sequence_length = 512;
  const auto image = decode_image(case_dir("wan21") / "image.png");
  // Text to video on an image-to-video pipeline, and a wrong image.
  EXPECT_THROW_MSG(sample_text_to_video(*model, {"x"}, options), "is a WanImageToVideoPipeline");
  EXPECT_THROW_MSG(sample_image_to_video(*model, {"x"}, image.to(torch::kFloat), options),
                   "--image: expected uint8 [height, width, 3]");
  EXPECT_THROW_MSG(sample_image_to_video(*model, {}, image, options), "at least one prompt");
  auto ti2v = WanModel::from_pretrained(case_dir("ti2v") / "pipeline");
  options.height = options.width = 64;
  EXPECT_THROW_MSG(prepare_image_conditioning(*ti2v, image, image, 1, options), "--last-image");

  // Image to video on a text-to-video pipeline.
  auto text_model = WanModel::from_pretrained(text_to_video_pipeline());
  EXPECT_THROW_MSG(sample_image_to_video(*text_model, {"x"}, image, options),
                   "is a WanPipeline (text to video): image-to-video needs a WanImageToVideoPipeline");

  // A transformer with CLIP inputs but no image encoder; an image encoder without its processor.
  const auto copy = dir / "copy";
  fs::remove_all(copy);
  fs::copy(source, copy, fs::copy_options::recursive);
  auto index = read_json_file(copy / "model_index.json");
  const auto saved = index;
  index["image_encoder"] = {nullptr, nullptr};
  std::ofstream(copy / "model_index.json") << index.dump();
  EXPECT_THROW_MSG(WanModel::from_pretrained(copy), "the transformer has image_dim 16 but the pipeline lists no image_encoder");
  index = saved;
  index["image_processor"] = {nullptr, nullptr};
  std::ofstream(copy / "model_index.json") << index.dump();
  EXPECT_THROW_MSG(WanModel::from_pretrained(copy), "image_encoder is listed without image_processor");
  // A text-to-video transformer (in_channels = z) in an image-to-video pipeline.
  index = saved;
  index["expand_timesteps"] = true;
  std::ofstream(copy / "model_index.json") << index.dump();
  EXPECT_THROW_MSG(WanModel::from_pretrained(copy), "with expand_timesteps needs transformer in_channels = z_dim = 4");
}

}  // namespace
}  // namespace mm
