// The Qwen2-VL processor against transformers 5.17 (AutoProcessor -> Qwen2_5_VLProcessor with
// Qwen2VLImageProcessor + Qwen2VLVideoProcessor), on files decoded by our own decoders.
#include <nlohmann/json.hpp>

#include <fstream>

#include "mm/core/json_config.h"
#include "mm/media/image_decode.h"
#include "mm/models/qwen2_vl/qwen2_vl_processor.h"
#include "testing.h"

namespace fs = std::filesystem;
using mm::testing::golden_dir;
using mm::testing::max_abs_diff;
using mm::testing::temp_dir;

namespace {

const fs::path& golden() {
  static const fs::path dir = golden_dir("qwen2_vl_processor");
  return dir;
}

const nlohmann::json& cases() {
  static const nlohmann::json json = mm::read_json_file(golden() / "cases.json");
  return json;
}

mm::Qwen2VLProcessor processor(const std::string& model) {
  return mm::Qwen2VLProcessor::from_pretrained(golden() / "models" / model);
}

fs::path write_config(const std::string& name, const std::string& json) {
  auto dir = temp_dir("qwen2vl_cfg_" + name);
  std::ofstream(dir / "preprocessor_config.json") << json;
  return dir;
}

}  // namespace

TEST(Qwen2VLSmartResize, EqualsTheReferenceIncludingItsErrors) {
  for (const auto& row : cases()["smart_resize"]) {
    SCOPED_TRACE(row.dump());
    const int64_t h = row[0], w = row[1], factor = row[2], lo = row[3], hi = row[4];
    if (row[6].is_null()) {
      auto [rh, rw] = mm::qwen2_vl::smart_resize(h, w, factor, lo, hi);
      EXPECT_EQ(rh, row[5][0].get<int64_t>());
      EXPECT_EQ(rw, row[5][1].get<int64_t>());
    } else {
      EXPECT_THROW_MSG(mm::qwen2_vl::smart_resize(h, w, factor, lo, hi),
                       "absolute aspect ratio must be smaller than 200");
    }
  }
  EXPECT_THROW_MSG(mm::qwen2_vl::smart_resize(0, 5), "empty image size 0x5");
}

TEST(Qwen2VLProcessor, EveryCaseMatchesTheReferenceFromOurDecodedFiles) {
  auto outputs = mm::SafetensorsFile::open(golden() / "outputs.safetensors");
  auto inputs = mm::SafetensorsFile::open(golden() / "inputs.safetensors");
  auto pil = mm::SafetensorsFile::open(golden() / "decoded.safetensors");
  double worst = 0;
  int checked = 0;
  for (const auto& c : cases()["cases"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const auto proc = processor(c["model"]);
    torch::Tensor want = outputs->tensor(name + ".pixel_values");
    torch::Tensor want_grid = outputs->tensor(name + ".grid_thw");
    if (c["kind"] == "images") {
      std::vector<torch::Tensor> ours, pils;
      for (const std::string file : c["files"]) {
        ours.push_back(mm::decode_image(golden() / "images" / file));
        pils.push_back(pil->tensor(file));
      }
      for (const auto* images : {&ours, &pils}) {  // our decoder, and PIL's pixels
        mm::VisionInputs got = proc.preprocess_images(*images);
        ASSERT_EQ(got.pixel_values.scalar_type(), torch::kFloat);
        EXPECT_TRUE(torch::equal(got.grid_thw, want_grid)) << got.grid_thw << want_grid;
        const double diff = max_abs_diff(got.pixel_values, want);
        EXPECT_LE(diff, 1e-5);
        worst = std::max(worst, diff);
      }
    } else {
      std::vector<mm::VideoFrameTimes> times;
      if (!c["sampled_fps"].is_null()) times.push_back({c["sampled_fps"].get<double>()});
      mm::VideoInputs got = proc.preprocess_videos({inputs->tensor(name + ".frames")}, times);
      EXPECT_TRUE(got.timestamps.empty());  // Qwen2VLVideoProcessor writes none
      EXPECT_TRUE(torch::equal(got.grid_thw, want_grid)) << got.grid_thw << want_grid;
      const double diff = max_abs_diff(got.pixel_values, want);
      EXPECT_LE(diff, 1e-5);
      worst = std::max(worst, diff);
      ASSERT_EQ(got.second_per_grid_ts.size(), 1u);
      EXPECT_NEAR(got.second_per_grid_ts[0], c["second_per_grid_ts"][0].get<double>(), 1e-7);
    }
    ++checked;
  }
  std::cout << "[ parity   ] " << checked << " cases, max |pixel_values - reference| = " << worst
            << "\n";
  RecordProperty("max_abs_diff", std::to_string(worst));
  EXPECT_GE(checked, 30);
}

TEST(Qwen2VLProcessor, ConfigsReadLikeTransformers) {
  const auto defaults = processor("defaults");
  EXPECT_EQ(defaults.image_config().min_pixels, 56 * 56);
  EXPECT_EQ(defaults.image_config().max_pixels, 28 * 28 * 1280);
  // No video config: the video processor reads preprocessor_config.json over its own defaults.
  EXPECT_EQ(defaults.video_config().min_pixels, 128 * 28 * 28);
  EXPECT_EQ(defaults.video_config().max_pixels, 28 * 28 * 768);
  const auto qwen25 = processor("qwen25");
  EXPECT_EQ(qwen25.video_config().max_pixels, 12845056);
  const auto small = processor("small");
  EXPECT_EQ(small.image_config().max_pixels, 28 * 28 * 20);
  EXPECT_EQ(small.video_config().min_pixels, 28 * 28 * 4);
  // fps in the config samples frames only with do_sample_frames, as in the reference.
  EXPECT_FALSE(small.video_config().video_sampling().fps.has_value());
  auto sampling_cfg = small.video_config();
  sampling_cfg.do_sample_frames = true;
  EXPECT_EQ(sampling_cfg.video_sampling().fps, 2.0);
  EXPECT_EQ(sampling_cfg.video_sampling().min_frames, 2);
  EXPECT_EQ(sampling_cfg.video_sampling().max_frames, 8);
  EXPECT_EQ(processor("odd_patch").video_config().temporal_patch_size, 3);
}

TEST(Qwen2VLProcessor, BadConfigsFailNamingFileAndKey) {
  EXPECT_THROW_MSG(mm::Qwen2VLProcessor::from_pretrained(write_config("malformed", "{\"patch_size\": 14,")),
                   "preprocessor_config.json: malformed JSON");
  EXPECT_THROW_MSG(mm::Qwen2VLProcessor::from_pretrained(write_config("type", "{\"patch_size\": \"14\"}")),
                   "preprocessor_config.json: patch_size: has the wrong type");
  EXPECT_THROW_MSG(mm::Qwen2VLProcessor::from_pretrained(
                       write_config("legacy", "{\"size\": {\"min_pixels\": 10, \"max_pixels\": 99}}")),
                   "preprocessor_config.json: size: needs shortest_edge and longest_edge");
  EXPECT_THROW_MSG(mm::Qwen2VLProcessor::from_pretrained(write_config("resample", "{\"resample\": 2}")),
                   "preprocessor_config.json: resample: only 3 (bicubic) is supported");
  EXPECT_THROW_MSG(mm::Qwen2VLProcessor::from_pretrained(write_config("zero", "{\"merge_size\": 0}")),
                   "preprocessor_config.json: merge_size: must be positive");
  EXPECT_THROW_MSG(mm::Qwen2VLProcessor::from_pretrained(write_config("mean", "{\"image_mean\": [1, 2]}")),
                   "preprocessor_config.json: image_mean: expected 1 or 3 values");
  EXPECT_THROW_MSG(mm::Qwen2VLProcessor::from_pretrained(temp_dir("qwen2vl_nothing")),
                   "has no preprocessor_config.json");
}

TEST(Qwen2VLProcessor, BadInputsFail) {
  const mm::Qwen2VLProcessor proc;
  EXPECT_THROW_MSG(proc.preprocess_images({torch::zeros({8, 8, 3}, torch::kFloat)}),
                   "image 0: expected uint8 [H, W, 3] RGB");
  EXPECT_THROW_MSG(proc.preprocess_images({torch::zeros({8, 8, 4}, torch::kByte)}),
                   "image 0: expected uint8 [H, W, 3] RGB");
  EXPECT_THROW_MSG(proc.preprocess_images({torch::zeros({1, 300, 3}, torch::kByte)}),
                   "image 0: absolute aspect ratio must be smaller than 200");
  EXPECT_THROW_MSG(proc.preprocess_videos({torch::zeros({0, 8, 8, 3}, torch::kByte)}),
                   "video 0: has no frames");
  EXPECT_THROW_MSG(proc.preprocess_videos({torch::zeros({2, 28, 28, 3}, torch::kByte)}, {{1.0}, {2.0}}),
                   "2 frame timings given for 1 videos");
  mm::Qwen2VLPreprocessConfig no_resize;
  no_resize.do_resize = false;
  EXPECT_THROW_MSG(mm::Qwen2VLProcessor(no_resize).preprocess_images(
                       {torch::zeros({30, 28, 3}, torch::kByte)}),
                   "image 0: size 30x28 is not a multiple of patch_size * merge_size = 28");
}

TEST(Qwen2VLPlaceholders, ExpandLikeQwen2_5_VLProcessor) {
  const auto& p = cases()["placeholders"];
  auto grid = [](const nlohmann::json& rows) {
    std::vector<int64_t> flat;
    for (const auto& r : rows) for (int64_t v : r) flat.push_back(v);
    return torch::tensor(flat, torch::kLong).reshape({static_cast<int64_t>(rows.size()), 3});
  };
  const torch::Tensor images = grid(p["image_grid_thw"]), videos = grid(p["video_grid_thw"]);
  EXPECT_EQ(mm::expand_vision_placeholders(p["text"], images, videos, p["merge_size"]),
            p["expanded"].get<std::string>());

  EXPECT_THROW_MSG(mm::expand_vision_placeholders(p["text"], images.narrow(0, 0, 2), videos, 2),
                   "the text has 3 image placeholders but 2 images were given");
  EXPECT_THROW_MSG(mm::expand_vision_placeholders("<|image_pad|>", images, {}, 2),
                   "the text has 1 image placeholders but 3 images were given");
  EXPECT_THROW_MSG(mm::expand_vision_placeholders("<|image_pad|>", images.narrow(0, 0, 1), videos, 2),
                   "the text has 0 video placeholders but 1 videos were given");
  EXPECT_EQ(mm::expand_vision_placeholders("no media", {}, {}, 2), "no media");
  auto repeat = [](const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
  };
  // Custom tokens; grids [1, 4, 4] -> 4 tokens and [2, 4, 6] -> 12 tokens at merge_size 2.
  EXPECT_EQ(mm::expand_vision_placeholders("<img>x<vid>", images.narrow(0, 0, 1), videos, 2, "<img>",
                                           "<vid>"),
            repeat("<img>", 4) + "x" + repeat("<vid>", 12));
}
