// The text-to-video dataset: bucket choice, the frame-sampling rule, crops, the bucketed batch
// sampler (never mixing buckets, deterministic, resumable, per-rank disjoint) and the dataset over
// videos and images made here with the ffmpeg CLI, including every kind of bad record.
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <map>
#include <set>

#include "mm/core/safetensors.h"
#include "mm/data/bucket_sampler.h"
#include "mm/media/image_decode.h"
#include "mm/data/text_video_dataset.h"
#include "mm/data/video_buckets.h"
#include "mm/media/video_probe.h"
#include "testing.h"

namespace fs = std::filesystem;
using mm::SkipReason;
using mm::VideoBucket;
using mm::testing::run_command;

namespace {

void ffmpeg(const std::string& args) {
  auto [rc, out] = run_command("ffmpeg -nostdin -hide_banner -loglevel error -y " + args);
  ASSERT_EQ(rc, 0) << "ffmpeg " << args << "\n" << out;
}

// testsrc of the given size and frame count at `rate` fps, stored losslessly in Matroska (no
// frame count in the container: the probe counts packets).
void testsrc(const fs::path& path, int w, int h, int frames, int rate = 8) {
  ffmpeg("-f lavfi -i testsrc=size=" + std::to_string(w) + "x" + std::to_string(h) + ":rate=" +
         std::to_string(rate) + " -frames:v " + std::to_string(frames) + " -c:v ffv1 " + path.string());
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

std::string record(const std::string& path, const std::string& caption) {
  return nlohmann::json{{"path", path}, {"caption", caption}}.dump() + "\n";
}

class TextVideoData : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(mm::testing::temp_dir("text_video"));
    const fs::path d = *dir_;
    testsrc(d / "wide_a.mkv", 96, 48, 17);
    testsrc(d / "wide_b.mkv", 96, 48, 20);
    testsrc(d / "wide_c.mkv", 128, 64, 17);
    testsrc(d / "tall.mkv", 48, 96, 17);
    testsrc(d / "square9.mkv", 64, 64, 9);
    // MP4 records its frame count (the probe reads it instead of counting).
    ffmpeg("-f lavfi -i testsrc=size=96x48:rate=8 -frames:v 17 -c:v libx264 -pix_fmt yuv420p " +
           (d / "wide_d.mp4").string());
    ffmpeg("-f lavfi -i testsrc=size=64x48:rate=1 -frames:v 1 " + (d / "image.png").string());
    // Frame n is grey 8n: which source frame a sample holds is read off its pixels.
    ffmpeg("-f lavfi -i color=c=black:size=16x16:rate=24 -frames:v 30 "
           "-vf \"format=rgb24,geq=r='N*8':g='N*8':b='N*8'\" -c:v ffv1 -pix_fmt bgr0 " +
           (d / "ramp24.mkv").string());
    // RGB (255, 0, 64) made in RGB (lavfi's color source goes through YUV and gives 253 for 255).
    ffmpeg("-f lavfi -i color=c=black:size=80x40:rate=8 -frames:v 5 "
           "-vf \"format=rgb24,geq=r='255':g='0':b='64'\" -c:v ffv1 -pix_fmt bgr0 " +
           (d / "red.mkv").string());
    testsrc(d / "short3.mkv", 96, 48, 3);
    testsrc(d / "tiny.mkv", 32, 16, 17);
    ffmpeg("-f lavfi -i testsrc=size=64x48:rate=8 -frames:v 0 -c:v ffv1 " + (d / "zero.mkv").string());
    write_text(d / "not_a_video.mp4", "this is text, not a video\n");
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static fs::path dir() { return *dir_; }
  static fs::path* dir_;

  // A: 2:1 17 frames, B: 1:2 17 frames, C: 1:1 9 frames, D: 1:1 17 frames, E: 3:2 one frame.
  static std::vector<VideoBucket> buckets() {
    return {{17, 32, 64}, {17, 64, 32}, {9, 48, 48}, {17, 48, 48}, {1, 32, 48}};
  }
  static mm::TextVideoDataConfig config(const fs::path& jsonl) {
    mm::TextVideoDataConfig c;
    c.jsonl = {jsonl};
    c.buckets = buckets();
    c.num_workers = 2;
    return c;
  }
  // The good records: 4 wide (bucket A), 1 tall (B), 1 square (C), 1 image (E).
  static fs::path good_jsonl() {
    const fs::path path = dir() / "good.jsonl";
    write_text(path, record("wide_a.mkv", "a wide clip") + record("tall.mkv", "a tall clip") +
                         record("wide_b.mkv", "another wide clip") + "\n" +
                         record("square9.mkv", "a square clip") + record("image.png", "an image") +
                         record((dir() / "wide_c.mkv").string(), "an absolute path") +
                         record("wide_d.mp4", "an mp4"));
    return path;
  }
};
fs::path* TextVideoData::dir_ = nullptr;

std::vector<std::vector<int64_t>> drain(mm::BucketBatchSampler& s) {
  std::vector<std::vector<int64_t>> out;
  while (auto b = s.next()) out.push_back(*b);
  return out;
}

}  // namespace

TEST(VideoBuckets, ChoiceByAspectRatioThenFrames) {
  const std::vector<VideoBucket> b = {{81, 480, 832}, {81, 832, 480}, {81, 624, 624}, {49, 480, 832},
                                      {1, 480, 832},  {1, 624, 624}};
  const mm::BucketRules rules;
  auto pick = [&](int64_t w, int64_t h, int64_t frames, mm::BucketRules r) -> int64_t {
    auto i = mm::choose_bucket(b, w, h, frames, r);
    return i ? static_cast<int64_t>(*i) : -1;
  };
  EXPECT_EQ(pick(1920, 1080, 200, rules), 0);  // 16:9, enough frames for 81
  EXPECT_EQ(pick(1080, 1920, 200, rules), 1);  // 9:16
  EXPECT_EQ(pick(1000, 1000, 81, rules), 2);   // square
  EXPECT_EQ(pick(640, 480, 81, rules), 0);     // 4:3 is nearer 832/480 (log 0.26) than 1:1 (0.29)
  EXPECT_EQ(pick(1920, 1080, 80, rules), 3);   // too short for 81: the 49-frame 16:9 bucket
  EXPECT_EQ(pick(1080, 1920, 80, rules), 5);   // 9:16 at 49 frames does not exist: nearest fillable is 1:1 x1
  EXPECT_EQ(pick(1920, 1080, 1, rules), 4);    // an image
  EXPECT_EQ(pick(1920, 1080, 0, rules), -1);
  mm::BucketRules no_up;
  no_up.allow_upscale = false;
  EXPECT_EQ(pick(320, 180, 200, rules), 0);
  EXPECT_EQ(pick(320, 180, 200, no_up), -1);   // smaller than every bucket
  EXPECT_EQ(pick(832, 480, 200, no_up), 0);    // exactly the bucket's size
  EXPECT_EQ(pick(700, 700, 200, no_up), 2);
  mm::BucketRules strict;
  strict.max_aspect_mismatch = 1.5;
  EXPECT_EQ(pick(4000, 1000, 200, strict), -1);  // 4:1 vs 832/480: ratio 2.31 > 1.5
  EXPECT_EQ(pick(4000, 1000, 200, rules), 0);    // BucketRules' default is no limit (the config's is 2.0)
}

TEST(VideoBuckets, GeneratedFromPixelBudget) {
  const auto b = mm::make_buckets(480 * 832, {16.0 / 9, 1.0, 9.0 / 16, 1.0}, {1, 81});
  ASSERT_EQ(b.size(), 6u);  // the repeated 1.0 is kept once
  for (const auto& x : b) {
    EXPECT_EQ(x.height % 16, 0);
    EXPECT_EQ(x.width % 16, 0);
    EXPECT_NEAR(static_cast<double>(x.height * x.width) / (480 * 832), 1.0, 0.05) << mm::to_string(x);
  }
  EXPECT_EQ(b[0], (VideoBucket{1, 480, 848}));  // sqrt(399360 * 9 / 16) = 474 -> 480; * 16/9 = 842.6 -> 848
  EXPECT_EQ(b[1], (VideoBucket{1, 624, 624}));  // sqrt(399360) = 631.9 -> 624
  EXPECT_EQ(b[2], (VideoBucket{1, 848, 480}));
  EXPECT_EQ(b[3].frames, 81);
  EXPECT_THROW(mm::validate_bucket({16, 480, 832}, "x"), mm::Error);
  EXPECT_THROW(mm::validate_bucket({17, 480, 830}, "x"), mm::Error);
}

TEST(VideoBuckets, FrameSamplingRule) {
  using V = std::vector<int64_t>;
  mm::FrameSampling every;
  EXPECT_EQ(mm::fillable_frames(17, 8, every), 17);
  EXPECT_EQ(mm::clip_frame_indices(17, 8, every, 5), (V{0, 1, 2, 3, 4}));  // the first frames (DiffSynth)
  mm::FrameSampling interval{std::nullopt, 2};
  EXPECT_EQ(mm::fillable_frames(17, 8, interval), 9);
  EXPECT_EQ(mm::fillable_frames(18, 8, interval), 9);
  EXPECT_EQ(mm::clip_frame_indices(17, 8, interval, 9), (V{0, 2, 4, 6, 8, 10, 12, 14, 16}));
  mm::FrameSampling fps8{8.0, 1};
  EXPECT_EQ(mm::fillable_frames(30, 24, fps8), 10);  // step 3: 0, 3, ..., 27
  EXPECT_EQ(mm::clip_frame_indices(30, 24, fps8, 5), (V{0, 3, 6, 9, 12}));
  EXPECT_EQ(mm::fillable_frames(30, 30, mm::FrameSampling{10.0, 1}), 10);  // 30 / 10 = 3 exactly, no float slip
  EXPECT_EQ(mm::clip_frame_indices(30, 30, mm::FrameSampling{10.0, 1}, 10), (V{0, 3, 6, 9, 12, 15, 18, 21, 24, 27}));
  mm::FrameSampling fps10{10.0, 1};
  EXPECT_EQ(mm::clip_frame_indices(25, 25, fps10, 5), (V{0, 2, 5, 7, 10}));  // step 2.5
  EXPECT_EQ(mm::fillable_frames(25, 25, fps10), 10);                          // 9 * 2.5 = 22.5 -> 22
  mm::FrameSampling fps30{30.0, 1};
  EXPECT_EQ(mm::clip_frame_indices(8, 24, fps30, 7), (V{0, 0, 1, 2, 3, 4, 4}));  // step 0.8: sample and hold
  EXPECT_EQ(mm::fillable_frames(8, 24, fps30), 10);
  EXPECT_EQ(mm::fillable_frames(0, 24, fps8), 0);
  try {
    mm::fillable_frames(30, 0, fps8, "clip.mp4");
    FAIL() << "unknown source fps accepted";
  } catch (const mm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("clip.mp4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(mm::clip_frame_indices(30, 24, fps8, 11), mm::Error);
}

TEST(VideoBuckets, CropWindowsAndValues) {
  const VideoBucket b{1, 32, 64};
  const auto w = mm::crop_window(48, 128, b);  // scale max(32/48, 64/128) = 2/3 -> 32 x 85
  EXPECT_EQ(w.resized_height, 32);
  EXPECT_EQ(w.resized_width, 85);
  EXPECT_EQ(w.top, 0);
  EXPECT_EQ(w.left, 10);  // round(21 / 2) = 10 (half to even, as torchvision's center_crop)
  const auto up = mm::crop_window(10, 10, b);  // upscaled to cover: 64 x 64
  EXPECT_EQ(up.resized_height, 64);
  EXPECT_EQ(up.resized_width, 64);
  EXPECT_EQ(up.top, 16);
  std::set<int64_t> lefts;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const auto r = mm::crop_window(48, 128, b, seed);
    EXPECT_EQ(r.top, 0);
    EXPECT_GE(r.left, 0);
    EXPECT_LE(r.left, 21);
    lefts.insert(r.left);
    EXPECT_EQ(r.left, mm::crop_window(48, 128, b, seed).left);  // the seed decides
  }
  EXPECT_GT(lefts.size(), 15u);  // and the offsets spread over the 22 possible

  torch::Tensor rgb = torch::randint(0, 256, {48, 128, 3}, torch::kByte);
  rgb.select(2, 0).fill_(255);
  rgb.select(2, 1).fill_(0);
  const torch::Tensor out = mm::resize_and_crop(rgb, w, b);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{3, 32, 64}));
  EXPECT_LE(out.max().item<float>(), 1.0f);
  EXPECT_GE(out.min().item<float>(), -1.0f);
  EXPECT_LT((out[0] - 1).abs().max().item<float>(), 1e-5);  // constant channels stay exact
  EXPECT_LT((out[1] + 1).abs().max().item<float>(), 1e-5);
  // No resize when the frame already has the covering size: the crop is the exact pixels.
  const auto same = mm::crop_window(32, 80, b);
  ASSERT_EQ(same.left, 8);
  const torch::Tensor exact = mm::resize_and_crop(rgb.slice(0, 0, 32).slice(1, 0, 80).contiguous(), same, b);
  const torch::Tensor expected =
      rgb.slice(0, 0, 32).slice(1, 8, 72).permute({2, 0, 1}).to(torch::kFloat) / 127.5 - 1;
  EXPECT_LT(mm::testing::max_abs_diff(exact, expected), 1e-6);
}

// Against DiffSynth-Studio's ImageCropAndResize (torchvision on PIL, tests/reference/text_video_crop.py):
// the same covering size and crop offset, pixels within a bound. PIL resizes in uint8 (rounded)
// with its own fixed-point filter; ours stays in float.
TEST(VideoBuckets, CropMatchesDiffSynthImageCropAndResize) {
  const fs::path dir = mm::testing::golden_dir("text_video_crop");
  const auto cases = mm::Checkpoint::open(dir / "cases.safetensors");
  int i = 0;
  for (; cases.contains("case" + std::to_string(i) + ".expected"); ++i) {
    const std::string c = "case" + std::to_string(i);
    const torch::Tensor bucket_hw = cases.tensor(c + ".bucket"), resized = cases.tensor(c + ".resized");
    const VideoBucket bucket{1, bucket_hw[0].item<int64_t>(), bucket_hw[1].item<int64_t>()};
    const torch::Tensor rgb = mm::decode_image(dir / (c + ".png"));
    const auto window = mm::crop_window(rgb.size(0), rgb.size(1), bucket);
    EXPECT_EQ(window.resized_height, resized[0].item<int64_t>()) << c;
    EXPECT_EQ(window.resized_width, resized[1].item<int64_t>()) << c;
    const torch::Tensor expected = cases.tensor(c + ".expected");
    const torch::Tensor ours = mm::resize_and_crop(rgb, window, bucket);
    const double diff = mm::testing::max_abs_diff(ours, expected);
    const double mean = (ours - expected).abs().mean().item<double>();
    // One 8-bit level is 2/255 = 0.0078; PIL's rounding is half of one.
    EXPECT_LT(diff, 1.5 * 2 / 255.0) << c;
    EXPECT_LT(mean, 0.4 * 2 / 255.0) << c;
    std::cout << c << " " << rgb.size(1) << "x" << rgb.size(0) << " -> " << mm::to_string(bucket)
              << ": max |ours - DiffSynth| = " << diff << ", mean " << mean << "\n";
  }
  EXPECT_EQ(i, 5) << "cases in the golden";
}

TEST(BucketSampler, NeverMixesBucketsDeterministicAndDisjoint) {
  std::vector<int64_t> bucket_of(1000);
  for (size_t i = 0; i < bucket_of.size(); ++i) bucket_of[i] = static_cast<int64_t>((i * 7919) % 5) * 3;
  for (int64_t batch : {1, 4, 7}) {
    for (bool drop_last : {false, true}) {
      mm::BucketSamplerOptions o;
      o.batch_size = batch;
      o.drop_last = drop_last;
      o.seed = 11;
      mm::BucketBatchSampler one(bucket_of, o);
      const auto e0 = one.epoch_batches(0), e1 = one.epoch_batches(1);
      EXPECT_NE(e0, e1);
      EXPECT_EQ(e0, mm::BucketBatchSampler(bucket_of, o).epoch_batches(0));  // same seed, same order
      o.seed = 12;
      EXPECT_NE(e0, mm::BucketBatchSampler(bucket_of, o).epoch_batches(0));
      o.seed = 11;
      std::multiset<int64_t> seen;
      for (const auto& b : e0) {
        ASSERT_FALSE(b.empty());
        EXPECT_LE(static_cast<int64_t>(b.size()), batch);
        if (drop_last) {
          EXPECT_EQ(static_cast<int64_t>(b.size()), batch);
        }
        for (int64_t i : b) {
          EXPECT_EQ(bucket_of[i], bucket_of[b[0]]) << "a batch mixes buckets";
          seen.insert(i);
        }
      }
      // Every sample once (without drop_last); with it, at most batch - 1 per bucket are left out.
      EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size());
      if (drop_last) {
        EXPECT_GE(seen.size(), 1000u - 5 * (batch - 1));
      } else {
        EXPECT_EQ(seen.size(), 1000u);
      }

      for (int64_t world : {2, 3, 4}) {
        std::set<int64_t> all;
        size_t total = 0;
        int64_t per_rank = -1;
        for (int64_t rank = 0; rank < world; ++rank) {
          mm::BucketSamplerOptions r = o;
          r.rank = rank;
          r.world = world;
          r.drop_last = true;
          const auto mine = mm::BucketBatchSampler(bucket_of, r).epoch_batches(3);
          if (per_rank < 0) per_rank = static_cast<int64_t>(mine.size());
          EXPECT_EQ(static_cast<int64_t>(mine.size()), per_rank) << "ranks run different step counts";
          for (const auto& b : mine)
            for (int64_t i : b) {
              all.insert(i);
              ++total;
            }
        }
        EXPECT_EQ(all.size(), total) << "ranks share samples (world " << world << ")";
        EXPECT_GT(total, 1000u - 5u * batch - static_cast<size_t>(world * batch));
      }
    }
  }
}

TEST(BucketSampler, ResumeGivesTheRemainingBatches) {
  std::vector<int64_t> bucket_of(101);
  for (size_t i = 0; i < bucket_of.size(); ++i) bucket_of[i] = static_cast<int64_t>(i % 3);
  mm::BucketSamplerOptions o;
  o.batch_size = 4;
  o.seed = 5;
  o.rank = 1;
  o.world = 2;
  mm::BucketBatchSampler full(bucket_of, o);
  full.start_epoch(2);
  const auto all = drain(full);
  ASSERT_EQ(static_cast<int64_t>(all.size()), full.batches_per_rank());
  mm::BucketBatchSampler first(bucket_of, o);
  first.start_epoch(2);
  for (int k = 0; k < 5; ++k) ASSERT_EQ(*first.next(), all[k]);
  // Rank 1 took 5 batches; rank 0 as many: everything before the 11th batch of the epoch is done.
  const mm::SamplerState saved = mm::SamplerState::from_json(first.after_taking({5, first.taken()}).to_json());
  EXPECT_EQ(saved, (mm::SamplerState{2, 10, {}}));
  mm::BucketBatchSampler resumed(bucket_of, o);
  resumed.restore(saved);
  const auto rest = drain(resumed);
  EXPECT_EQ(rest, std::vector<std::vector<int64_t>>(all.begin() + 5, all.end()));
  resumed.restore({2, 1000, {}});  // past the epoch's end: nothing is left of it
  EXPECT_FALSE(resumed.next());
  mm::BucketSamplerOptions bad;
  bad.batch_size = 0;
  EXPECT_THROW(mm::BucketBatchSampler(bucket_of, bad), mm::Error);
}

TEST_F(TextVideoData, ProbeCountsFramesWithoutDecoding) {
  const auto mkv = mm::probe_video(dir() / "wide_a.mkv");
  EXPECT_EQ(mkv.width, 96);
  EXPECT_EQ(mkv.height, 48);
  EXPECT_EQ(mkv.frames, 17);
  EXPECT_DOUBLE_EQ(mkv.fps, 8.0);
  const auto mp4 = mm::probe_video(dir() / "wide_d.mp4");
  EXPECT_EQ(mp4.frames, 17);
  EXPECT_EQ(mm::probe_video(dir() / "ramp24.mkv").frames, 30);
  EXPECT_THROW(mm::probe_video(dir() / "not_a_video.mp4"), mm::Error);
  EXPECT_THROW(mm::probe_video(dir() / "absent.mp4"), mm::Error);
}

TEST_F(TextVideoData, BucketsShapesAndValues) {
  const auto ds = mm::TextVideoDataset::open(config(good_jsonl()));
  ASSERT_EQ(ds.size(), 7);
  EXPECT_EQ(ds.skips().total(), 0);
  const std::vector<int64_t> expected = {0, 1, 0, 2, 4, 0, 0};  // wide, tall, wide, square9, image, wide, wide
  EXPECT_EQ(ds.bucket_ids(), expected);
  EXPECT_EQ(ds.record(5).path, dir() / "wide_c.mkv");  // absolute paths stay as given
  EXPECT_EQ(ds.record(0).where, (dir() / "good.jsonl").string() + ":1");
  EXPECT_EQ(ds.record(3).where, (dir() / "good.jsonl").string() + ":5");  // the blank line counts
  for (int64_t i = 0; i < ds.size(); ++i) {
    const auto s = ds.load(i);
    const VideoBucket& b = ds.buckets()[ds.bucket_of(i)];
    ASSERT_EQ(s.video.sizes(), (std::vector<int64_t>{3, b.frames, b.height, b.width})) << s.path;
    EXPECT_EQ(s.video.scalar_type(), torch::kFloat);
    EXPECT_GE(s.video.min().item<float>(), -1.0f);
    EXPECT_LE(s.video.max().item<float>(), 1.0f);
    EXPECT_LT(s.video.min().item<float>(), -0.5f) << s.path;  // testsrc spans dark to bright
    EXPECT_GT(s.video.max().item<float>(), 0.5f) << s.path;
    EXPECT_EQ(s.caption, ds.record(i).caption);
  }
  // Frames differ over time (testsrc moves), so they really come from different source frames.
  const auto wide = ds.load(0);
  EXPECT_GT((wide.video.select(1, 0) - wide.video.select(1, 16)).abs().max().item<float>(), 0.1f);
}

TEST_F(TextVideoData, FpsSamplingPicksTheRightSourceFrames) {
  const fs::path jsonl = dir() / "ramp.jsonl";
  write_text(jsonl, record("ramp24.mkv", "a ramp"));
  for (auto [fps, step] : std::vector<std::pair<double, double>>{{8.0, 3.0}, {12.0, 2.0}, {24.0, 1.0}, {9.6, 2.5}}) {
    auto c = config(jsonl);
    c.buckets = {{9, 16, 16}};
    c.fps = fps;
    const auto ds = mm::TextVideoDataset::open(c);
    ASSERT_EQ(ds.size(), 1);
    const auto indices = ds.frame_indices(0);
    ASSERT_EQ(indices.size(), 9u);
    const auto s = ds.load(0);
    for (int64_t k = 0; k < 9; ++k) {
      const int64_t src = static_cast<int64_t>(std::floor(k * step + 1e-9));
      EXPECT_EQ(indices[k], src) << "fps " << fps << " k " << k;
      // grey 8 * src in every channel and pixel (lossless RGB, no resize at 16x16)
      const float want = static_cast<float>(8 * src) / 127.5f - 1;
      EXPECT_LT((s.video.select(1, k) - want).abs().max().item<float>(), 1e-5) << "fps " << fps << " k " << k;
    }
  }
  auto c = config(jsonl);
  c.buckets = {{9, 16, 16}};
  c.fps = 2.0;  // step 12: 30 frames fill only 3
  const auto ds = mm::TextVideoDataset::open(c);
  EXPECT_EQ(ds.size(), 0);
  EXPECT_EQ(ds.skips().count(SkipReason::too_few_frames), 1);
}

TEST_F(TextVideoData, SolidColourSurvivesResizeAndCrop) {
  const fs::path jsonl = dir() / "red.jsonl";
  write_text(jsonl, record("red.mkv", "red"));
  auto c = config(jsonl);
  c.buckets = {{5, 16, 32}};  // 80x40 -> 32x16: a real downscale
  c.random_crop = true;
  const auto ds = mm::TextVideoDataset::open(c);
  ASSERT_EQ(ds.size(), 1);
  const auto s = ds.load(0, 123);
  ASSERT_EQ(s.video.sizes(), (std::vector<int64_t>{3, 5, 16, 32}));
  EXPECT_LT((s.video[0] - 1).abs().max().item<float>(), 1e-5);
  EXPECT_LT((s.video[1] + 1).abs().max().item<float>(), 1e-5);
  EXPECT_LT((s.video[2] - (64 / 127.5 - 1)).abs().max().item<float>(), 1e-5);
}

TEST_F(TextVideoData, BatchesShareOneBucketAndResumeExactly) {
  auto c = config(good_jsonl());
  c.random_crop = true;
  const auto ds = mm::TextVideoDataset::open(c);
  const mm::BucketSamplerOptions o = c.sampler_options(/*batch_size=*/2, /*seed=*/3);
  std::vector<mm::TextVideoBatch> all;
  {
    mm::TextVideoBatches batches(ds, mm::BucketBatchSampler(ds.bucket_ids(), o));
    batches.start_epoch(1);
    while (auto b = batches.next()) all.push_back(std::move(*b));
  }
  // 4 wide -> 2 batches of 2; tall, square, image: 1 each.
  ASSERT_EQ(all.size(), 5u);
  std::multiset<int64_t> seen;
  for (const auto& b : all) {
    const VideoBucket& bucket = ds.buckets()[b.bucket];
    ASSERT_EQ(b.video.sizes(), (std::vector<int64_t>{static_cast<int64_t>(b.indices.size()), 3, bucket.frames,
                                                     bucket.height, bucket.width}));
    ASSERT_EQ(b.captions.size(), b.indices.size());
    for (size_t k = 0; k < b.indices.size(); ++k) {
      EXPECT_EQ(ds.bucket_of(b.indices[k]), b.bucket) << "a batch mixes buckets";
      EXPECT_EQ(b.captions[k], ds.record(b.indices[k]).caption);
      EXPECT_EQ(b.paths[k], ds.record(b.indices[k]).path.string());
      seen.insert(b.indices[k]);
    }
  }
  EXPECT_EQ(seen, (std::multiset<int64_t>{0, 1, 2, 3, 4, 5, 6}));

  mm::SamplerState saved;
  {
    mm::TextVideoBatches batches(ds, mm::BucketBatchSampler(ds.bucket_ids(), o));
    batches.start_epoch(1);
    for (int k = 0; k < 2; ++k) batches.next();
    saved = batches.sampler().after_taking({batches.sampler().taken()});
  }
  EXPECT_EQ(saved, (mm::SamplerState{1, 2, {}}));
  mm::TextVideoBatches resumed(ds, mm::BucketBatchSampler(ds.bucket_ids(), o), saved);
  for (size_t k = 2; k < all.size(); ++k) {
    auto b = resumed.next();
    ASSERT_TRUE(b);
    EXPECT_EQ(b->indices, all[k].indices);
    EXPECT_TRUE(torch::equal(b->video, all[k].video)) << "batch " << k << " differs after resume (random crop too)";
  }
  EXPECT_FALSE(resumed.next());

  // Two ranks with drop_last: disjoint samples.
  std::set<int64_t> rank_seen[2];
  for (int64_t rank = 0; rank < 2; ++rank) {
    mm::BucketSamplerOptions r = o;
    r.rank = rank;
    r.world = 2;
    r.drop_last = true;
    mm::TextVideoBatches batches(ds, mm::BucketBatchSampler(ds.bucket_ids(), r));
    while (auto b = batches.next()) rank_seen[rank].insert(b->indices.begin(), b->indices.end());
    EXPECT_EQ(rank_seen[rank].size(), 2u);  // the two full wide batches, one per rank
  }
  for (int64_t i : rank_seen[0]) EXPECT_FALSE(rank_seen[1].count(i)) << i;
}

TEST_F(TextVideoData, BadRecordsAreSkippedAndCounted) {
  const fs::path jsonl = dir() / "bad.jsonl";
  write_text(jsonl, record("wide_a.mkv", "good") +                      // 1
                        record("not_a_video.mp4", "unreadable") +       // 2 corrupt
                        record("zero.mkv", "no frames") +               // 3 corrupt
                        record("wide_b.mkv", "one two three four five six seven") +  // 4 too long
                        record("tiny.mkv", "smaller than every bucket") +            // 5 no bucket
                        record("absent.mkv", "missing file") +          // 6 missing
                        "{not json\n" +                                 // 7 malformed
                        "{\"path\": \"wide_a.mkv\"}\n" +               // 8 malformed (no caption)
                        "[1, 2]\n" +                                    // 9 malformed
                        record("short3.mkv", "three frames") +          // 10 too few frames
                        record("wide_d.mp4", "good too"));              // 11
  auto c = config(jsonl);
  c.buckets = {{17, 32, 64}, {5, 32, 64}};
  c.allow_upscale = false;
  c.max_caption_words = 6;
  const auto ds = mm::TextVideoDataset::open(c);
  EXPECT_EQ(ds.size(), 2);
  EXPECT_EQ(ds.record(0).where, jsonl.string() + ":1");
  EXPECT_EQ(ds.record(1).where, jsonl.string() + ":11");
  const auto& s = ds.skips();
  EXPECT_EQ(s.count(SkipReason::corrupt_media), 2);
  EXPECT_EQ(s.count(SkipReason::caption_too_long), 1);
  EXPECT_EQ(s.count(SkipReason::no_bucket), 1);
  EXPECT_EQ(s.count(SkipReason::missing_media), 1);
  EXPECT_EQ(s.count(SkipReason::malformed_record), 3);
  EXPECT_EQ(s.count(SkipReason::too_few_frames), 1);
  EXPECT_EQ(s.total(), 9);
  EXPECT_EQ(s.to_json()["total"], 9);

  // Character limit (code points, not bytes): "héllo" is 5 characters.
  const fs::path chars = dir() / "chars.jsonl";
  write_text(chars, record("wide_a.mkv", "h\xc3\xa9llo") + record("wide_b.mkv", "h\xc3\xa9llo!"));
  auto cc = config(chars);
  cc.max_caption_chars = 5;
  const auto ds_chars = mm::TextVideoDataset::open(cc);
  EXPECT_EQ(ds_chars.size(), 1);
  EXPECT_EQ(ds_chars.skips().count(SkipReason::caption_too_long), 1);

  // on_error: fail throws the first bad record's error, naming the line and the file.
  const std::vector<std::pair<std::string, std::pair<SkipReason, std::string>>> cases = {
      {record("not_a_video.mp4", "x"), {SkipReason::corrupt_media, "not_a_video.mp4"}},
      {record("zero.mkv", "x"), {SkipReason::corrupt_media, "zero.mkv"}},
      {record("wide_b.mkv", "one two three four five six seven"), {SkipReason::caption_too_long, "7 words"}},
      {record("tiny.mkv", "x"), {SkipReason::no_bucket, "tiny.mkv"}},
      {record("absent.mkv", "x"), {SkipReason::missing_media, "absent.mkv"}},
      {"{not json\n", {SkipReason::malformed_record, "not JSON"}},
      {"{\"path\": \"a.mkv\"}\n", {SkipReason::malformed_record, "\"caption\""}},
      {record("short3.mkv", "x"), {SkipReason::too_few_frames, "short3.mkv"}},
  };
  for (const auto& [line, want] : cases) {
    const fs::path one = dir() / "one_bad.jsonl";
    write_text(one, record("wide_a.mkv", "good") + line);
    auto f = config(one);
    f.buckets = c.buckets;
    f.allow_upscale = false;
    f.max_caption_words = 6;
    f.on_error = mm::OnError::fail;
    try {
      mm::TextVideoDataset::open(f);
      ADD_FAILURE() << "no error for " << line;
    } catch (const mm::SampleError& e) {
      EXPECT_EQ(e.reason(), want.first) << e.what();
      const std::string what = e.what();
      EXPECT_NE(what.find(one.string() + ":2"), std::string::npos) << what;
      EXPECT_NE(what.find(want.second), std::string::npos) << what;
    }
  }
}

TEST_F(TextVideoData, LoadTimeFailureIsSkippedInTheBatch) {
  const fs::path copy = dir() / "doomed.mkv";
  fs::copy_file(dir() / "wide_a.mkv", copy, fs::copy_options::overwrite_existing);
  const fs::path jsonl = dir() / "doomed.jsonl";
  write_text(jsonl, record("wide_b.mkv", "survives") + record("doomed.mkv", "deleted after probing"));
  const auto ds = mm::TextVideoDataset::open(config(jsonl));
  ASSERT_EQ(ds.size(), 2);
  fs::remove(copy);
  mm::BucketSamplerOptions o;
  o.batch_size = 2;
  mm::TextVideoBatches batches(ds, mm::BucketBatchSampler(ds.bucket_ids(), o));
  auto b = batches.next();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->indices, (std::vector<int64_t>{0}));
  EXPECT_EQ(b->video.size(0), 1);
  EXPECT_EQ(batches.skips().count(SkipReason::missing_media), 1);
  EXPECT_FALSE(batches.next());

  auto failing = config(jsonl);
  failing.on_error = mm::OnError::fail;
  fs::copy_file(dir() / "wide_a.mkv", copy, fs::copy_options::overwrite_existing);
  const auto ds_fail = mm::TextVideoDataset::open(failing);
  fs::remove(copy);
  mm::TextVideoBatches strict(ds_fail, mm::BucketBatchSampler(ds_fail.bucket_ids(), o));
  try {
    strict.next();
    FAIL() << "on_error: fail did not throw at load time";
  } catch (const mm::SampleError& e) {
    EXPECT_EQ(e.reason(), SkipReason::missing_media);
    EXPECT_NE(std::string(e.what()).find("doomed.mkv"), std::string::npos) << e.what();
  }
}

TEST_F(TextVideoData, ProbeCacheIsReusedAndInvalidatedByChanges) {
  const fs::path cache = dir() / "cache" / "probes.json";
  const fs::path clip = dir() / "changing.mkv";
  testsrc(clip, 96, 48, 17);
  const fs::path jsonl = dir() / "cached.jsonl";
  write_text(jsonl, record("changing.mkv", "a clip") + record("wide_a.mkv", "another"));
  auto c = config(jsonl);
  c.probe_cache = cache;
  const auto first = mm::TextVideoDataset::open(c);
  ASSERT_TRUE(fs::exists(cache));
  nlohmann::json j = nlohmann::json::parse(std::ifstream(cache));
  ASSERT_EQ(j["entries"].size(), 2u);
  EXPECT_EQ(j["entries"][fs::absolute(clip).lexically_normal().string()]["frames"], 17);
  // A cached entry is believed: forge one and see it used.
  j["entries"][fs::absolute(dir() / "wide_a.mkv").lexically_normal().string()]["frames"] = 5;
  std::ofstream(cache) << j.dump();
  const auto second = mm::TextVideoDataset::open(c);
  ASSERT_EQ(second.size(), 2);
  EXPECT_EQ(second.record(1).total_frames, 5);
  EXPECT_EQ(second.record(0).total_frames, 17);
  // A changed file (other size) is probed again.
  testsrc(clip, 96, 48, 9);
  const auto third = mm::TextVideoDataset::open(c);
  EXPECT_EQ(third.record(0).total_frames, 9);
  // 9 frames fill the 9-frame square bucket (aspect 1 vs 2) and the 3:2 image bucket; the nearer
  // aspect ratio wins over the frame count.
  EXPECT_EQ(third.bucket_of(0), 4);
}

TEST(TextVideoConfig, FromYamlAndErrorsNameTheKey) {
  const YAML::Node ok = YAML::Load(
      "data:\n"
      "  jsonl: [a.jsonl, b.jsonl]\n"
      "  buckets: [[81, 480, 832], [1, 480, 832]]\n"
      "  fps: 16\n  max_caption_words: 200\n  random_crop: true\n  allow_upscale: false\n  on_error: fail\n");
  const auto c = mm::TextVideoDataConfig::from_yaml(ok, "run.yaml");
  ASSERT_EQ(c.jsonl.size(), 2u);
  EXPECT_EQ(c.buckets, (std::vector<VideoBucket>{{81, 480, 832}, {1, 480, 832}}));
  EXPECT_EQ(c.fps, 16.0);
  EXPECT_EQ(c.max_caption_words, 200);
  EXPECT_TRUE(c.random_crop);
  EXPECT_FALSE(c.allow_upscale);
  EXPECT_EQ(c.on_error, mm::OnError::fail);
  YAML::Node generated;
  generated["data"] = YAML::Load("jsonl: a.jsonl\nbucket_pixels: 399360\nbucket_aspect_ratios: [1.0]\nbucket_frames: [1, 81]");
  const auto g = mm::TextVideoDataConfig::from_yaml(generated, "run.yaml");
  ASSERT_EQ(g.jsonl.size(), 1u);
  EXPECT_EQ(g.resolved_buckets(), (std::vector<VideoBucket>{{1, 624, 624}, {81, 624, 624}}));

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"jsonl: a.jsonl\nbuckets: [[80, 480, 832]]\n", "data.buckets[0]: frames"},
      {"jsonl: a.jsonl\nbuckets: [[81, 480, 830]]\n", "data.buckets[0]: width"},
      {"jsonl: a.jsonl\nbuckets: [[81, 480]]\n", "data.buckets[0]"},
      {"buckets: [[81, 480, 832]]\n", "data.jsonl"},
      {"jsonl: a.jsonl\n", "data.buckets"},
      {"jsonl: a.jsonl\nbuckets: [[81, 480, 832]]\nbucket_pixels: 1000\n", "data.buckets"},
      {"jsonl: a.jsonl\nbucket_pixels: 399360\nbucket_aspect_ratios: [1.0]\nbucket_frames: [80]\n",
       "data.bucket_frames"},
      {"jsonl: a.jsonl\nbuckets: [[81, 480, 832]]\nfps: -1\n", "data.fps"},
      {"jsonl: a.jsonl\nbuckets: [[81, 480, 832]]\nfps: 8\nframe_interval: 2\n", "data.frame_interval"},
      {"jsonl: a.jsonl\nbuckets: [[81, 480, 832]]\non_error: ignore\n", "data.on_error"},
      {"jsonl: a.jsonl\nbuckets: [[81, 480, 832]]\nmax_aspect_mismatch: 0.5\n", "data.max_aspect_mismatch"},
      {"jsonl: a.jsonl\nbuckets: [[81, 480, 832]]\nrandom_crop: maybe\n", "data.random_crop"},
      {"jsonl: a.jsonl\nbuckets: [[81, 480, 832]]\nfsp: 8\n", "data.fsp: unknown key"},
  };
  for (const auto& [yaml, want] : bad) {
    YAML::Node root;
    root["data"] = YAML::Load(yaml);
    try {
      mm::TextVideoDataConfig::from_yaml(root, "run.yaml");
      ADD_FAILURE() << "accepted:\n" << yaml;
    } catch (const mm::Error& e) {
      EXPECT_NE(std::string(e.what()).find("run.yaml: " + want), std::string::npos) << e.what();
    }
  }
  // A JSONL that cannot be opened is an error of the run, not a skipped sample.
  mm::TextVideoDataConfig missing;
  missing.jsonl = {"/nonexistent/train.jsonl"};
  missing.buckets = {{1, 16, 16}};
  EXPECT_THROW(mm::TextVideoDataset::open(missing), mm::Error);
}
