// Video encoding: files read back by ffprobe (frame count, size, codec, rate) and by our decoder
// (pixels close to the originals for the lossy codecs), odd sizes padded as documented, atomic
// writes that leave nothing behind on error, and frames as PNGs.
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "mm/media/image_decode.h"
#include "mm/media/video_decode.h"
#include "mm/media/video_encode.h"
#include "test_files.h"
#include "testing.h"

namespace fs = std::filesystem;
using mm::testing::read_file;
using mm::testing::run_command;

namespace {

// A smooth gradient that drifts over time with a dark square moving across: [T, H, W, 3] uint8.
torch::Tensor test_frames(int64_t t, int64_t h, int64_t w) {
  auto y = torch::arange(h, torch::kFloat).view({1, h, 1});
  auto x = torch::arange(w, torch::kFloat).view({1, 1, w});
  auto f = torch::arange(t, torch::kFloat).view({t, 1, 1});
  auto r = 40 + 160 * x / w + 0 * y + 4 * f;
  auto g = 60 + 150 * y / h + 0 * x + 0 * f;
  auto b = 200 - 100 * (x + y) / (w + h) + 0 * f;
  auto frames = torch::stack({r, g, b}, 3).expand({t, h, w, 3}).clone();
  for (int64_t i = 0; i < t; ++i) {
    const int64_t x0 = (i * 3) % std::max<int64_t>(w - 8, 1);
    frames.index({i, torch::indexing::Slice(h / 4, h / 4 + 8), torch::indexing::Slice(x0, x0 + 8)}).fill_(20);
  }
  return frames.round().clamp(0, 255).to(torch::kUInt8);
}

nlohmann::json ffprobe(const fs::path& path) {
  auto [rc, out] = run_command(
      "ffprobe -v error -count_frames -select_streams v:0 -show_entries "
      "stream=nb_read_frames,width,height,codec_name,pix_fmt,r_frame_rate -of json " + path.string(),
      false);
  EXPECT_EQ(rc, 0) << out;
  const auto json = nlohmann::json::parse(out);
  EXPECT_EQ(json["streams"].size(), 1u) << out;
  return json["streams"][0];
}

double mean_abs_error(const torch::Tensor& a, const torch::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  return (a.to(torch::kFloat) - b.to(torch::kFloat)).abs().mean().item<double>();
}

}  // namespace

TEST(WriteVideo, H264ReadBackByFfprobeAndOurDecoder) {
  const auto dir = mm::testing::temp_dir("write_video_h264");
  const auto frames = test_frames(9, 48, 64);
  const mm::WrittenVideo written = mm::write_video(dir / "a.mp4", frames);
  EXPECT_EQ(written.encoder, "libx264");  // the Debian FFmpeg has it
  EXPECT_EQ(written.codec, "h264");
  EXPECT_EQ(written.frames, 9);
  EXPECT_EQ(written.width, 64);
  EXPECT_EQ(written.height, 48);
  EXPECT_FALSE(fs::exists(dir / "a.mp4.tmp"));

  const auto probe = ffprobe(dir / "a.mp4");
  EXPECT_EQ(probe["codec_name"], "h264");
  EXPECT_EQ(probe["pix_fmt"], "yuv420p");
  EXPECT_EQ(probe["nb_read_frames"], "9");
  EXPECT_EQ(probe["width"], 64);
  EXPECT_EQ(probe["height"], 48);
  EXPECT_EQ(probe["r_frame_rate"], "8/1");

  const mm::DecodedVideo video = mm::decode_video(dir / "a.mp4");
  ASSERT_EQ(video.frames.sizes(), frames.sizes());
  EXPECT_DOUBLE_EQ(video.fps, 8.0);
  EXPECT_NEAR(video.timestamps.back(), 1.0, 1e-3);
  const double mae = mean_abs_error(video.frames, frames);
  const double max_frame_mae =
      (video.frames.to(torch::kFloat) - frames.to(torch::kFloat)).abs().mean({1, 2, 3}).max().item<double>();
  std::cout << "[ h264     ] crf 18 mean |decoded - original| = " << mae << ", worst frame " << max_frame_mae
            << "\n";
  EXPECT_LT(mae, 2.0);
  EXPECT_LT(max_frame_mae, 3.0);
}

TEST(WriteVideo, Mpeg4EncoderAndTheQualityKnob) {
  const auto dir = mm::testing::temp_dir("write_video_mpeg4");
  const auto frames = test_frames(9, 48, 64);
  mm::VideoEncodeOptions options;
  options.encoder = "mpeg4";
  const mm::WrittenVideo written = mm::write_video(dir / "m.mp4", frames, options);
  EXPECT_EQ(written.encoder, "mpeg4");
  EXPECT_EQ(written.codec, "mpeg4");
  const auto probe = ffprobe(dir / "m.mp4");
  EXPECT_EQ(probe["codec_name"], "mpeg4");
  EXPECT_EQ(probe["nb_read_frames"], "9");
  EXPECT_EQ(probe["width"], 64);
  EXPECT_EQ(probe["height"], 48);
  const double mae = mean_abs_error(mm::decode_video(dir / "m.mp4").frames, frames);
  std::cout << "[ mpeg4    ] crf 18 (q 3) mean |decoded - original| = " << mae << "\n";
  EXPECT_LT(mae, 3.0);

  // Lower crf: closer pixels and a bigger file, for both encoders.
  for (const char* encoder : {"libx264", "mpeg4"}) {
    options.encoder = encoder;
    options.crf = 0;
    mm::write_video(dir / "best.mp4", frames, options);
    options.crf = 45;
    mm::write_video(dir / "worst.mp4", frames, options);
    const double best = mean_abs_error(mm::decode_video(dir / "best.mp4").frames, frames);
    const double worst = mean_abs_error(mm::decode_video(dir / "worst.mp4").frames, frames);
    std::cout << "[ quality  ] " << encoder << " crf 0: " << best << " (" << fs::file_size(dir / "best.mp4")
              << " bytes), crf 45: " << worst << " (" << fs::file_size(dir / "worst.mp4") << " bytes)\n";
    EXPECT_LT(best, worst) << encoder;
    EXPECT_LT(best, 1.5) << encoder;  // what is left is the 4:2:0 chroma subsampling
    EXPECT_GT(fs::file_size(dir / "best.mp4"), fs::file_size(dir / "worst.mp4")) << encoder;
  }
}

TEST(WriteVideo, FractionalFrameRateAndSingleFrame) {
  const auto dir = mm::testing::temp_dir("write_video_fps");
  mm::VideoEncodeOptions options;
  options.fps = 29.97;
  mm::write_video(dir / "ntsc.mp4", test_frames(5, 32, 32), options);
  EXPECT_EQ(ffprobe(dir / "ntsc.mp4")["r_frame_rate"], "2997/100");
  EXPECT_NEAR(mm::decode_video(dir / "ntsc.mp4").fps, 29.97, 1e-9);

  const auto one = test_frames(1, 32, 48);
  mm::write_video(dir / "one.mp4", one);
  EXPECT_EQ(ffprobe(dir / "one.mp4")["nb_read_frames"], "1");
  EXPECT_LT(mean_abs_error(mm::decode_video(dir / "one.mp4").frames, one), 2.0);
}

// An odd size is padded by repeating the last column / row; the top-left crop is the input.
TEST(WriteVideo, OddSizesArePaddedByRepeatingTheEdge) {
  const auto dir = mm::testing::temp_dir("write_video_odd");
  const auto frames = test_frames(4, 33, 45);
  const mm::WrittenVideo written = mm::write_video(dir / "odd.mp4", frames);
  EXPECT_EQ(written.width, 46);
  EXPECT_EQ(written.height, 34);
  const auto probe = ffprobe(dir / "odd.mp4");
  EXPECT_EQ(probe["width"], 46);
  EXPECT_EQ(probe["height"], 34);
  EXPECT_EQ(probe["nb_read_frames"], "4");
  const auto decoded = mm::decode_video(dir / "odd.mp4").frames;
  ASSERT_EQ(decoded.sizes(), (std::vector<int64_t>{4, 34, 46, 3}));
  using torch::indexing::Slice;
  const double crop = mean_abs_error(decoded.index({Slice(), Slice(0, 33), Slice(0, 45)}), frames);
  const double last_col = mean_abs_error(decoded.select(2, 45).narrow(1, 0, 33), frames.select(2, 44));
  const double last_row = mean_abs_error(decoded.select(1, 33).narrow(1, 0, 45), frames.select(1, 32));
  std::cout << "[ odd size ] 33x45 -> 34x46: crop error " << crop << ", padded column " << last_col
            << ", padded row " << last_row << "\n";
  EXPECT_LT(crop, 2.0);
  EXPECT_LT(last_col, 3.0);
  EXPECT_LT(last_row, 3.0);

  // Odd only in one direction, through the mpeg4 encoder too.
  mm::VideoEncodeOptions options;
  options.encoder = "mpeg4";
  const auto narrow = mm::write_video(dir / "narrow.mp4", test_frames(2, 32, 17), options);
  EXPECT_EQ(narrow.width, 18);
  EXPECT_EQ(narrow.height, 32);
  EXPECT_EQ(mm::decode_video(dir / "narrow.mp4").frames.sizes(), (std::vector<int64_t>{2, 32, 18, 3}));
}

TEST(WriteVideo, SameFramesSameBytes) {
  const auto dir = mm::testing::temp_dir("write_video_bytes");
  const auto frames = test_frames(6, 32, 32);
  mm::write_video(dir / "a.mp4", frames);
  mm::write_video(dir / "b.mp4", frames);
  EXPECT_EQ(read_file(dir / "a.mp4"), read_file(dir / "b.mp4"));
  // Overwriting an existing file replaces it.
  mm::write_video(dir / "a.mp4", test_frames(3, 32, 32));
  EXPECT_EQ(ffprobe(dir / "a.mp4")["nb_read_frames"], "3");
  // A non-contiguous view and another device-independent layout give the same file.
  const auto transposed = frames.transpose(1, 2).contiguous().transpose(1, 2);
  mm::write_video(dir / "c.mp4", transposed);
  EXPECT_EQ(read_file(dir / "b.mp4"), read_file(dir / "c.mp4"));
}

TEST(WriteVideo, ErrorsNameThePathAndLeaveNoFile) {
  const auto dir = mm::testing::temp_dir("write_video_bad");
  const auto frames = test_frames(2, 16, 16);

  const fs::path missing = dir / "no" / "such" / "x.mp4";
  EXPECT_THROW_MSG(mm::write_video(missing, frames), "x.mp4: cannot open " + missing.string() + ".tmp for writing: No such file or directory");
  EXPECT_FALSE(fs::exists(dir / "no"));

  EXPECT_THROW_MSG(mm::write_video(dir / "x.notacontainer", frames),
                   "x.notacontainer: no video container for the extension '.notacontainer'");

  // The target is a non-empty directory: the encoded file cannot be renamed over it and goes.
  fs::create_directories(dir / "taken.mp4");
  std::ofstream(dir / "taken.mp4" / "keep") << "x";
  EXPECT_THROW_MSG(mm::write_video(dir / "taken.mp4", frames), "taken.mp4: cannot rename");
  EXPECT_FALSE(fs::exists(dir / "taken.mp4.tmp"));
  EXPECT_TRUE(fs::exists(dir / "taken.mp4" / "keep"));

  EXPECT_THROW_MSG(mm::write_video(dir / "f.mp4", frames.to(torch::kFloat)),
                   "f.mp4: write_video expects uint8 [frames, height, width, 3] RGB, got [2, 16, 16, 3] Float");
  EXPECT_THROW_MSG(mm::write_video(dir / "g.mp4", torch::zeros({2, 16, 16, 4}, torch::kUInt8)),
                   "g.mp4: write_video expects uint8 [frames, height, width, 3]");
  EXPECT_THROW_MSG(mm::write_video(dir / "h.mp4", torch::zeros({16, 16, 3}, torch::kUInt8)),
                   "h.mp4: write_video expects");
  EXPECT_THROW_MSG(mm::write_video(dir / "e.mp4", torch::zeros({0, 16, 16, 3}, torch::kUInt8)),
                   "e.mp4: cannot write a video of size [0, 16, 16, 3]");

  mm::VideoEncodeOptions options;
  options.fps = 0;
  EXPECT_THROW_MSG(mm::write_video(dir / "o.mp4", frames, options), "o.mp4: video encoding: fps must be in (0, 1000], got 0");
  options = {};
  options.crf = 52;
  EXPECT_THROW_MSG(mm::write_video(dir / "o.mp4", frames, options), "crf must be in [0, 51], got 52");
  options = {};
  options.encoder = "vp9";
  EXPECT_THROW_MSG(mm::write_video(dir / "o.mp4", frames, options),
                   "encoder must be auto, libx264 or mpeg4, got 'vp9'");

  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename(), "taken.mp4") << "left behind: " << e.path();
}

TEST(WriteFramesPng, NumberedLosslessFrames) {
  const auto dir = mm::testing::temp_dir("write_frames_png");
  const auto frames = test_frames(3, 20, 30);
  mm::write_frames_png(dir / "frames", frames);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir / "frames")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"frame_000000.png", "frame_000001.png", "frame_000002.png"}));
  for (int64_t i = 0; i < 3; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "frame_%06lld.png", static_cast<long long>(i));
    EXPECT_TRUE(torch::equal(mm::decode_image(dir / "frames" / name), frames[i])) << name;
  }
  EXPECT_THROW_MSG(mm::write_frames_png(dir / "bad", frames[0]),
                   "bad: write_frames_png expects uint8 [frames, height, width, 3] RGB, got [20, 30, 3]");
  std::ofstream(dir / "file") << "x";
  EXPECT_THROW_MSG(mm::write_frames_png(dir / "file", frames), "file: cannot create the frame directory");
}
