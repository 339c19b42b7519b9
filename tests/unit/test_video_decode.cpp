// Video decoding of small videos made at test time with the ffmpeg CLI, and frame sampling
// against transformers' Qwen2VLVideoProcessor.sample_frames.
#include <nlohmann/json.hpp>

#include <fstream>

#include "mm/core/json_config.h"
#include "mm/media/video_decode.h"
#include "testing.h"

namespace fs = std::filesystem;
using mm::testing::run_command;

namespace {

// Runs ffmpeg quietly; the test fails loudly if it cannot (ffmpeg is a declared dependency).
void ffmpeg(const std::string& args) {
  auto [rc, out] = run_command("ffmpeg -nostdin -hide_banner -loglevel error -y " + args);
  ASSERT_EQ(rc, 0) << "ffmpeg " << args << "\n" << out;
}

class VideoDecode : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(mm::testing::temp_dir("video_decode"));
    // 2 s of testsrc at 10 fps, odd size, stored losslessly as RGB: exact pixels are known.
    ffmpeg("-f lavfi -i testsrc=size=67x45:rate=10:duration=2 -c:v ffv1 -pix_fmt bgr0 " +
           (*dir_ / "testsrc.mkv").string());
    // A solid colour through H.264 4:2:0 with B-frames (decoder delay must be drained).
    ffmpeg("-f lavfi -i color=c=0x3080C0:size=64x48:rate=10:duration=2 -c:v libx264 -pix_fmt yuv420p " +
           (*dir_ / "solid.mp4").string());
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static fs::path dir() { return *dir_; }
  static fs::path* dir_;
};
fs::path* VideoDecode::dir_ = nullptr;

}  // namespace

TEST_F(VideoDecode, AllFramesWithTimestampsAndExactPixels) {
  const fs::path path = dir() / "testsrc.mkv";
  mm::DecodedVideo video = mm::decode_video(path);
  ASSERT_EQ(video.frames.sizes(), (std::vector<int64_t>{20, 45, 67, 3}));
  EXPECT_EQ(video.frames.scalar_type(), torch::kByte);
  EXPECT_DOUBLE_EQ(video.fps, 10.0);
  EXPECT_EQ(video.total_frames, 20);
  ASSERT_EQ(video.timestamps.size(), 20u);
  for (int i = 0; i < 20; ++i) {
    EXPECT_NEAR(video.timestamps[i], i * 0.1, 1e-3) << i;
    EXPECT_EQ(video.frame_indices[i], i);
  }
  EXPECT_DOUBLE_EQ(video.sampled_fps(), 10.0);

  // The ffmpeg CLI's own RGB dump of the same file.
  const fs::path raw = dir() / "testsrc.rgb";
  ffmpeg("-i " + path.string() + " -f rawvideo -pix_fmt rgb24 " + raw.string());
  std::ifstream in(raw, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes.size(), size_t(20 * 45 * 67 * 3));
  torch::Tensor want = torch::from_blob(bytes.data(), {20, 45, 67, 3}, torch::kByte);
  EXPECT_TRUE(torch::equal(video.frames, want));
  EXPECT_GT(video.frames.to(torch::kFloat).std().item<double>(), 10);  // not a blank video
}

TEST_F(VideoDecode, SolidColourThroughH264WithinCompressionTolerance) {
  mm::DecodedVideo video = mm::decode_video(dir() / "solid.mp4");
  ASSERT_EQ(video.frames.sizes(), (std::vector<int64_t>{20, 48, 64, 3}));
  EXPECT_NEAR(video.fps, 10.0, 1e-9);
  EXPECT_NEAR(video.timestamps.back(), 1.9, 1e-3);
  torch::Tensor colour = torch::tensor({0x30, 0x80, 0xC0}, torch::kFloat);
  const double diff = (video.frames.to(torch::kFloat) - colour).abs().max().item<double>();
  std::cout << "[ h264     ] solid colour max |decoded - (48,128,192)| = " << diff << "\n";
  EXPECT_LE(diff, 3);
}

TEST_F(VideoDecode, SamplingByFpsAndByCountPicksTheReferenceFrames) {
  const fs::path path = dir() / "testsrc.mkv";
  mm::DecodedVideo all = mm::decode_video(path);

  mm::VideoSampling by_fps;
  by_fps.fps = 2.0;  // 20 frames / 10 fps * 2 = 4 frames
  mm::DecodedVideo video = mm::decode_video(path, by_fps);
  EXPECT_EQ(video.frame_indices, (std::vector<int64_t>{0, 5, 10, 15}));
  ASSERT_EQ(video.frames.size(0), 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(torch::equal(video.frames[i], all.frames[video.frame_indices[i]])) << i;
    EXPECT_NEAR(video.timestamps[i], 0.5 * i, 1e-3);
  }
  EXPECT_DOUBLE_EQ(video.sampled_fps(), 2.0);

  mm::VideoSampling by_count;
  by_count.num_frames = 6;
  video = mm::decode_video(path, by_count);
  EXPECT_EQ(video.frame_indices, (std::vector<int64_t>{0, 3, 6, 10, 13, 16}));
  EXPECT_TRUE(torch::equal(video.frames[3], all.frames[10]));

  mm::VideoSampling from_h264;  // B-frame reordering: sampled frames still in display order
  from_h264.num_frames = 4;
  EXPECT_EQ(mm::decode_video(dir() / "solid.mp4", from_h264).timestamps.size(), 4u);
}

TEST_F(VideoDecode, BrokenInputsFailNamingTheFile) {
  EXPECT_THROW_MSG(mm::decode_video(dir() / "missing.mp4"), "missing.mp4: no such video file");
  const fs::path text = dir() / "notes.mp4";
  std::ofstream(text) << "not a video\n";
  EXPECT_THROW_MSG(mm::decode_video(text), "notes.mp4: cannot open as a video");
  const fs::path audio = dir() / "tone.wav";
  ffmpeg("-f lavfi -i sine=duration=0.2 " + audio.string());
  EXPECT_THROW_MSG(mm::decode_video(audio), "tone.wav: has no video stream");
  const fs::path empty = dir() / "empty.avi";  // a video stream without a single frame
  ffmpeg("-f lavfi -i testsrc=size=32x32:rate=10:duration=1 -frames:v 0 -c:v ffv1 " + empty.string());
  EXPECT_THROW_MSG(mm::decode_video(empty), "empty.avi: the video has no frames");

  mm::VideoSampling too_many;
  too_many.num_frames = 40;
  EXPECT_THROW_MSG(mm::decode_video(dir() / "testsrc.mkv", too_many),
                   "testsrc.mkv: cannot sample 40 frames from a video of 20 frames");
  mm::VideoSampling both;
  both.fps = 1;
  both.num_frames = 4;
  EXPECT_THROW_MSG(mm::decode_video(dir() / "testsrc.mkv", both), "mutually exclusive");
}

TEST(FrameSampling, EqualsQwen2VLVideoProcessorSampleFrames) {
  const auto cases = mm::read_json_file(mm::testing::golden_dir("qwen2_vl_processor") / "cases.json");
  int checked = 0, errors = 0;
  for (const auto& row : cases["sample_frames"]) {
    mm::VideoSampling s;
    if (row.contains("fps")) s.fps = row["fps"].get<double>();
    if (row.contains("num_frames")) s.num_frames = row["num_frames"].get<int64_t>();
    s.min_frames = row["min_frames"];
    s.max_frames = row["max_frames"];
    s.temporal_patch_size = row["tps"];
    const int64_t total = row["total"];
    const double video_fps = row["video_fps"];
    SCOPED_TRACE(row.dump());
    if (row["error"].is_null()) {
      EXPECT_EQ(mm::sample_frame_indices(total, video_fps, s, "v.mp4"),
                row["indices"].get<std::vector<int64_t>>());
    } else {
      EXPECT_THROW(mm::sample_frame_indices(total, video_fps, s, "v.mp4"), mm::Error);
      ++errors;
    }
    ++checked;
  }
  EXPECT_GT(checked, 1000);
  EXPECT_GT(errors, 0);
  EXPECT_LT(errors, checked / 2);
}
