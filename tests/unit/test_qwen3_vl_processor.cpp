// Qwen3-VL preprocessing against transformers 5.17's Qwen3VLProcessor (oracle:
// tests/reference/qwen3_vl_processor.py): which video processor a directory gets, Qwen3's frame
// sampling and whole-clip smart_resize, pixel values and grids of images and videos, and the
// placeholder text with a timestamp before every temporal patch.
#include <fstream>

#include "mm/core/json_config.h"
#include "mm/core/safetensors.h"
#include "mm/media/video_decode.h"
#include "mm/models/qwen2_vl/qwen2_vl_processor.h"
#include "testing.h"

namespace fs = std::filesystem;
using mm::testing::golden_dir;
using mm::testing::max_abs_diff;

namespace {

fs::path oracle_dir() { return golden_dir("qwen3_vl_processor"); }

const nlohmann::json& cases_json() {
  static const nlohmann::json json = mm::read_json_file(oracle_dir() / "cases.json");
  return json;
}

std::string kind_name(mm::VideoProcessorKind kind) {
  return kind == mm::VideoProcessorKind::qwen3_vl ? "Qwen3VLVideoProcessor" : "Qwen2VLVideoProcessor";
}

}  // namespace

TEST(Qwen3VLProcessor, TheVideoProcessorIsTheOneAutoVideoProcessorPicks) {
  const auto& kinds = cases_json().at("video_kinds");
  ASSERT_EQ(kinds.size(), 8u);
  for (const auto& [variant, expected] : kinds.items()) {
    const auto processor = mm::Qwen2VLProcessor::from_pretrained(oracle_dir() / "kinds" / variant);
    EXPECT_EQ(kind_name(processor.video_config().video_kind), expected.get<std::string>()) << variant;
  }
  for (const std::string cfg : {"published", "small", "capped", "by_model_type"}) {
    const auto processor = mm::Qwen2VLProcessor::from_pretrained(oracle_dir() / "models" / cfg);
    EXPECT_EQ(processor.video_config().video_kind, mm::VideoProcessorKind::qwen3_vl) << cfg;
  }
  // Without a config of its own the Qwen3 video processor has its class defaults.
  const auto defaults = mm::Qwen2VLProcessor::from_pretrained(oracle_dir() / "models" / "by_model_type").video_config();
  EXPECT_EQ(defaults.fps, 2.0);
  EXPECT_TRUE(defaults.do_sample_frames);
  EXPECT_EQ(defaults.video_sampling().rule, mm::FrameRule::qwen3_vl);
}

TEST(Qwen3VLProcessor, FramesAreSampledAsTheReferenceSamplesThem) {
  int checked = 0;
  for (const auto& row : cases_json().at("sample_frames")) {
    mm::VideoSampling s;
    s.rule = mm::FrameRule::qwen3_vl;
    s.min_frames = row["min_frames"];
    s.max_frames = row["max_frames"];
    if (row.contains("fps")) s.fps = row["fps"].get<double>();
    else s.num_frames = row["num_frames"].get<int64_t>();
    const std::string what = row.dump();
    ASSERT_TRUE(row["error"].is_null()) << what;
    EXPECT_EQ(mm::sample_frame_indices(row["total"], row["video_fps"], s),
              row["indices"].get<std::vector<int64_t>>()) << what;
    ++checked;
  }
  EXPECT_EQ(checked, 576);
}

TEST(Qwen3VLProcessor, SmartResizeCountsTheWholeClip) {
  for (const auto& row : cases_json().at("smart_resize")) {
    const int64_t t = row[0], h = row[1], w = row[2], factor = row[3], lo = row[4], hi = row[5];
    const std::string what = row.dump();
    SCOPED_TRACE(what);
    if (row[7].is_null()) {
      const auto [rh, rw] = mm::qwen3_vl::smart_resize(t, h, w, 2, factor, lo, hi);
      EXPECT_EQ(rh, row[6][0].get<int64_t>()) << what;
      EXPECT_EQ(rw, row[6][1].get<int64_t>()) << what;
    } else {
      const std::string reason = row[7].get<std::string>();
      const std::string key = reason.find("aspect ratio") != std::string::npos ? "absolute aspect ratio"
                                                                                : "must be larger than temporal_factor";
      EXPECT_THROW_MSG(mm::qwen3_vl::smart_resize(t, h, w, 2, factor, lo, hi), key);
    }
  }
}

TEST(Qwen3VLProcessor, TimestampsAreTheReferences) {
  for (const auto& row : cases_json().at("timestamps")) {
    const auto got = mm::qwen3_vl::grid_timestamps(row["indices"], row["fps"], row["tps"]);
    const auto want = row["timestamps"].get<std::vector<double>>();
    ASSERT_EQ(got.size(), want.size()) << row.dump();
    for (size_t i = 0; i < got.size(); ++i) EXPECT_DOUBLE_EQ(got[i], want[i]) << row.dump();
  }
}

TEST(Qwen3VLProcessor, PixelsGridsAndTextEqualTheReference) {
  const auto inputs = mm::SafetensorsFile::open(oracle_dir() / "inputs.safetensors");
  const auto outputs = mm::SafetensorsFile::open(oracle_dir() / "outputs.safetensors");
  int checked = 0;
  for (const auto& c : cases_json().at("cases")) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const auto processor = mm::Qwen2VLProcessor::from_pretrained(oracle_dir() / "models" / c["model"].get<std::string>());
    torch::Tensor image_grid, video_grid;
    std::vector<std::vector<double>> timestamps;
    std::vector<at::Tensor> images;
    for (int i = 0; i < c["images"].get<int>(); ++i) images.push_back(inputs->tensor(name + ".image" + std::to_string(i)));
    if (!images.empty()) {
      const auto got = processor.preprocess_images(images);
      EXPECT_TRUE(torch::equal(got.grid_thw, outputs->tensor(name + ".image_grid_thw")));
      EXPECT_LE(max_abs_diff(got.pixel_values, outputs->tensor(name + ".pixel_values")), 1e-5);
      image_grid = got.grid_thw;
    }
    if (c.contains("indices")) {
      // The frames decode_video keeps, and where they came from.
      const auto indices = c["indices"].get<std::vector<int64_t>>();
      const auto frames = inputs->tensor(name + ".frames").index_select(0, torch::tensor(indices, torch::kLong));
      mm::VideoFrameTimes times;
      times.source_fps = c["fps"];
      times.frame_indices = indices;
      const auto got = processor.preprocess_videos({frames}, {times});
      EXPECT_TRUE(torch::equal(got.grid_thw, outputs->tensor(name + ".video_grid_thw")))
          << got.grid_thw << outputs->tensor(name + ".video_grid_thw");
      EXPECT_LE(max_abs_diff(got.pixel_values, outputs->tensor(name + ".pixel_values_videos")), 1e-5);
      ASSERT_EQ(got.timestamps.size(), 1u);
      video_grid = got.grid_thw;
      timestamps = got.timestamps;
    }
    if (c.contains("expanded"))
      EXPECT_EQ(processor.expand_placeholders(c["text"], image_grid, video_grid, timestamps), c["expanded"].get<std::string>());
    ++checked;
  }
  EXPECT_EQ(checked, 7);
}

TEST(Qwen3VLProcessor, MismatchedTimestampsAndShortVideosAreRefused) {
  const auto grid = torch::tensor({{2, 4, 4}}, torch::kLong);
  EXPECT_THROW_MSG(mm::expand_vision_placeholders_with_timestamps("<|video_pad|>", {}, grid, 2, {{0.5}}),
                   "video 0 has 1 timestamps for 2 temporal patches");
  EXPECT_THROW_MSG(mm::expand_vision_placeholders_with_timestamps("<|video_pad|>", {}, grid, 2, {}),
                   "0 videos have timestamps but 1 videos were given");
  const auto processor = mm::Qwen2VLProcessor::from_pretrained(oracle_dir() / "models" / "small");
  EXPECT_THROW_MSG(processor.preprocess_videos({torch::zeros({1, 64, 64, 3}, torch::kByte)}),
                   "video 0: t:1 must be larger than temporal_factor:2");
}
