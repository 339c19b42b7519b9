// The synthetic moving-shapes video dataset: the documented layout read back by ffprobe and our
// decoder, captions that say what the decoded pixels show (colour, shape, direction of motion or
// growth), the same files per seed, and `mmtrain data synth --kind video`.
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "mm/data/synth_shapes.h"
#include "mm/data/synth_video.h"
#include "mm/media/video_decode.h"
#include "test_files.h"
#include "testing.h"

namespace fs = std::filesystem;
using mm::testing::read_file;
using mm::testing::read_jsonl;
using mm::testing::file_tree;
using mm::testing::kMmtrain;
using mm::testing::run_command;

namespace {

mm::VideoSynthOptions small_options() {
  mm::VideoSynthOptions o;
  o.train = 36;
  o.test = 12;
  o.frames = 9;
  o.width = 64;
  o.height = 48;
  o.seed = 7;
  return o;
}

const fs::path& small_dataset() {
  static const fs::path dir = [] {
    auto d = mm::testing::temp_dir("synth_video_small") / "data";
    mm::write_video_dataset(d, small_options());
    return d;
  }();
  return dir;
}

// The shape in one decoded frame: its pixels are the saturated ones (the background is grey).
struct Blob {
  int64_t area = 0;
  double cx = 0, cy = 0;  // centroid in pixels
  double bx = 0, by = 0;  // bounding box centre in pixels (a triangle's stays put as it scales)
  double fill = 0;        // area / bounding box area
  double taper = 0;       // width a quarter down the box / width three quarters down: ~1/3 for an
                          // upward triangle, 1 for a circle or square
  std::vector<double> rgb;  // mean colour of the pixels well inside the shape
};

Blob find_blob(const torch::Tensor& frame) {  // uint8 [H, W, 3]
  const auto image = frame.to(torch::kInt64);
  const auto spread = std::get<0>(image.max(2)) - std::get<0>(image.min(2));
  const auto mask = spread > 80;  // grey pixels have a spread of a few levels after the codec
  Blob b;
  b.area = mask.sum().item<int64_t>();
  if (b.area == 0) return b;
  const auto yx = mask.nonzero().to(torch::kDouble);  // [area, 2]
  b.cy = yx.select(1, 0).mean().item<double>();
  b.cx = yx.select(1, 1).mean().item<double>();
  const auto ys = mask.any(1).nonzero().view(-1), xs = mask.any(0).nonzero().view(-1);
  const int64_t h = ys.max().item<int64_t>() - ys.min().item<int64_t>() + 1;
  const int64_t w = xs.max().item<int64_t>() - xs.min().item<int64_t>() + 1;
  b.by = (ys.max().item<int64_t>() + ys.min().item<int64_t>()) / 2.0;
  b.bx = (xs.max().item<int64_t>() + xs.min().item<int64_t>()) / 2.0;
  const auto widths = mask.sum(1);
  const int64_t y0 = ys.min().item<int64_t>();
  b.taper = widths[y0 + h / 4].item<double>() / std::max(widths[y0 + (3 * h) / 4].item<double>(), 1.0);
  b.fill = static_cast<double>(b.area) / static_cast<double>(h * w);
  // Interior: the mask eroded by one pixel in each direction, away from the blurred chroma edge.
  auto m = mask.to(torch::kFloat).unsqueeze(0).unsqueeze(0);
  const auto interior = (-torch::max_pool2d(-m, 3, 1, 1)).squeeze() > 0.5;
  const auto pixels = interior.any().item<bool>() ? interior : mask;
  const auto colour = image.masked_select(pixels.unsqueeze(2).expand_as(image)).view({-1, 3}).to(torch::kDouble).mean(0);
  b.rgb = {colour[0].item<double>(), colour[1].item<double>(), colour[2].item<double>()};
  return b;
}

}  // namespace

TEST(VideoDataset, WritesTheDocumentedLayout) {
  const auto& dir = small_dataset();
  EXPECT_TRUE(fs::exists(dir / "README.txt"));
  const auto train = read_jsonl(dir / "train.jsonl");
  const auto test = read_jsonl(dir / "test.jsonl");
  ASSERT_EQ(train.size(), 36u);
  ASSERT_EQ(test.size(), 12u);
  int64_t checked = 0;
  for (const auto& [split, records] : {std::pair{"train", &train}, std::pair{"test", &test}}) {
    for (size_t i = 0; i < records->size(); ++i) {
      const auto& r = (*records)[i];
      char name[64];
      std::snprintf(name, sizeof name, "videos/%s/%06zu.mp4", split, i);
      EXPECT_EQ(r.size(), 2u) << r;
      ASSERT_EQ(r["path"], name) << r;
      ASSERT_TRUE(r["caption"].is_string()) << r;
      const mm::DecodedVideo video = mm::decode_video(dir / name);
      EXPECT_EQ(video.frames.sizes(), (std::vector<int64_t>{9, 48, 64, 3})) << name;
      EXPECT_DOUBLE_EQ(video.fps, 8.0) << name;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 48);
  EXPECT_EQ(file_tree(dir).size(), 48u + 3u);  // no temporary file is left
  // ffprobe reads the first clip of each split as 9 frames of 64x48 H.264.
  for (const char* clip : {"videos/train/000000.mp4", "videos/test/000011.mp4"}) {
    auto [rc, out] = run_command("ffprobe -v error -count_frames -select_streams v:0 -show_entries "
                                 "stream=nb_read_frames,width,height,codec_name -of json " + (dir / clip).string(),
                                 false);
    ASSERT_EQ(rc, 0) << out;
    const auto s = nlohmann::json::parse(out)["streams"][0];
    EXPECT_EQ(s["codec_name"], "h264") << clip;
    EXPECT_EQ(s["nb_read_frames"], "9") << clip;
    EXPECT_EQ(s["width"], 64) << clip;
    EXPECT_EQ(s["height"], 48) << clip;
  }
}

// Each caption says what the decoded clip shows: the shape's colour is nearest the named palette
// colour; it is the named shape (a triangle is a third as wide a quarter down its bounding box
// as three quarters down, a square fills its box, a circle ~pi/4 of it); between the first and last
// frames its centroid moves at least a quarter of the frame in the named direction (staying put
// across it), or its area grows / shrinks at least threefold around a fixed bounding-box centre.
TEST(VideoDataset, CaptionsMatchTheDecodedPixels) {
  const auto& dir = small_dataset();
  const auto& colours = mm::synth_video_colours();
  const auto& motions = mm::synth_video_motions();
  const std::regex caption("a (\\w+) (\\w+) (.+)");
  std::map<std::string, int> seen;  // each colour, shape and motion word
  double worst_colour = 0, least_travel = 1e9, least_ratio = 1e9;
  std::map<std::string, std::pair<double, double>> fills, tapers;  // shape -> (min, max)
  int64_t checked = 0;
  for (const char* split : {"train", "test"}) {
    for (const auto& r : read_jsonl(dir / (std::string(split) + ".jsonl"))) {
      const std::string text = r["caption"];
      SCOPED_TRACE(r.dump());
      std::smatch m;
      ASSERT_TRUE(std::regex_match(text, m, caption));
      const std::string colour = m[1], kind = m[2], motion = m[3];
      ASSERT_NE(std::find(motions.begin(), motions.end(), motion), motions.end());
      ++seen[colour], ++seen[kind], ++seen[motion];

      const auto frames = mm::decode_video(dir / r["path"].get<std::string>()).frames;
      const Blob first = find_blob(frames[0]), last = find_blob(frames[frames.size(0) - 1]);
      ASSERT_GT(first.area, 0);
      ASSERT_GT(last.area, 0);

      const Blob& big = first.area > last.area ? first : last;
      std::string nearest;
      double best = 1e9;
      for (const auto& c : colours) {
        double d2 = 0;
        for (int ch = 0; ch < 3; ++ch) d2 += (big.rgb[ch] - c.rgb[ch]) * (big.rgb[ch] - c.rgb[ch]);
        if (d2 < best) best = d2, nearest = c.name;
      }
      EXPECT_EQ(nearest, colour);
      worst_colour = std::max(worst_colour, std::sqrt(best));

      const std::string shape = big.taper < 0.65 ? "triangle" : big.fill > 0.85 ? "square" : "circle";
      EXPECT_EQ(shape, kind) << "fill " << big.fill << ", taper " << big.taper;
      auto& range = fills.try_emplace(kind, 1.0, 0.0).first->second;
      range = {std::min(range.first, big.fill), std::max(range.second, big.fill)};
      auto& taper = tapers.try_emplace(kind, 1e9, 0.0).first->second;
      taper = {std::min(taper.first, big.taper), std::max(taper.second, big.taper)};

      const double dx = last.cx - first.cx, dy = last.cy - first.cy;
      const double ratio = static_cast<double>(last.area) / static_cast<double>(first.area);
      if (motion == "moving from left to right" || motion == "moving from right to left") {
        least_travel = std::min(least_travel, (motion == "moving from left to right" ? dx : -dx) / 64);
        EXPECT_GT(motion == "moving from left to right" ? dx : -dx, 64 / 4.0) << dx;
        EXPECT_LT(std::abs(dy), 1.0);
      } else if (motion == "moving up" || motion == "moving down") {
        least_travel = std::min(least_travel, (motion == "moving down" ? dy : -dy) / 48);
        EXPECT_GT(motion == "moving down" ? dy : -dy, 48 / 4.0) << dy;
        EXPECT_LT(std::abs(dx), 1.0);
      } else {
        least_ratio = std::min(least_ratio, motion == "growing" ? ratio : 1 / ratio);
        EXPECT_GT(motion == "growing" ? ratio : 1 / ratio, 3.0) << first.area << " -> " << last.area;
        EXPECT_LE(std::max(std::abs(last.bx - first.bx), std::abs(last.by - first.by)), 1.5);
      }
      ++checked;
    }
  }
  std::cout << "[ captions ] " << checked << " clips checked; worst distance of a decoded shape colour to "
            << "its palette colour: " << worst_colour << "; least travel " << least_travel
            << " of the frame; least area ratio " << least_ratio << "; fill";
  for (const auto& [kind, range] : fills) std::cout << " " << kind << " " << range.first << ".." << range.second;
  std::cout << "; taper";
  for (const auto& [kind, range] : tapers) std::cout << " " << kind << " " << range.first << ".." << range.second;
  std::cout << "\n";
  EXPECT_EQ(checked, 48);
  for (const auto& c : colours) EXPECT_GT(seen[c.name], 0) << c.name;
  for (const auto& k : mm::shapes_kinds()) EXPECT_GT(seen[k], 0) << k;
  for (const auto& m : motions) EXPECT_GT(seen[m], 0) << m;
}

TEST(VideoDataset, VocabularyIsTheShapesDatasets) {
  std::vector<std::string> names;
  for (const auto& c : mm::synth_video_colours()) names.push_back(c.name);
  EXPECT_EQ(names, mm::shapes_colors());
  EXPECT_EQ(mm::synth_video_motions().size(), 6u);
}

TEST(VideoDataset, SameOptionsSameFilesOtherSeedOtherClips) {
  const auto dir = mm::testing::temp_dir("synth_video_seed");
  mm::VideoSynthOptions o;
  o.train = 6;
  o.test = 3;
  o.frames = 5;
  o.width = 32;
  o.height = 32;
  o.seed = 42;
  mm::write_video_dataset(dir / "a", o);
  mm::write_video_dataset(dir / "b", o);
  const auto a = file_tree(dir / "a");
  EXPECT_EQ(a.size(), 6u + 3u + 3u);
  EXPECT_EQ(a, file_tree(dir / "b"));
  // Rewriting into an existing directory gives the same files again.
  mm::write_video_dataset(dir / "a", o);
  EXPECT_EQ(a, file_tree(dir / "a"));
  o.seed = 43;
  mm::write_video_dataset(dir / "c", o);
  const auto c = file_tree(dir / "c");
  EXPECT_NE(a.at("videos/train/000000.mp4"), c.at("videos/train/000000.mp4"));
  EXPECT_NE(a.at("train.jsonl"), c.at("train.jsonl"));
  // No two clips of a split show the same thing.
  std::set<std::string> clips;
  for (int i = 0; i < 6; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "videos/train/%06d.mp4", i);
    const auto frames = mm::decode_video(dir / "a" / name).frames;
    clips.insert(std::string(static_cast<const char*>(frames.data_ptr()), frames.numel()));
  }
  EXPECT_EQ(clips.size(), 6u);
}

TEST(VideoDataset, OneFrameClips) {
  const auto dir = mm::testing::temp_dir("synth_video_one");
  mm::VideoSynthOptions o;
  o.train = 2;
  o.test = 0;
  o.frames = 1;
  o.width = 16;
  o.height = 32;
  mm::write_video_dataset(dir, o);
  EXPECT_EQ(read_jsonl(dir / "test.jsonl").size(), 0u);
  const auto frames = mm::decode_video(dir / "videos" / "train" / "000001.mp4").frames;
  EXPECT_EQ(frames.sizes(), (std::vector<int64_t>{1, 32, 16, 3}));
  EXPECT_GT(find_blob(frames[0]).area, 0);
}

TEST(VideoDataset, BadOptionsAndOutputDirectoryAreErrors) {
  const auto dir = mm::testing::temp_dir("synth_video_bad");
  auto expect_error = [&](auto change, const std::string& message) {
    mm::VideoSynthOptions o;
    change(o);
    EXPECT_THROW_MSG(mm::write_video_dataset(dir / "x", o), message);
  };
  expect_error([](auto& o) { o.width = 50; }, "video dataset: width must be a multiple of 16 in [16, 2048], got 50");
  expect_error([](auto& o) { o.height = 0; }, "height must be a multiple of 16 in [16, 2048], got 0");
  expect_error([](auto& o) { o.height = 4096; }, "height must be a multiple of 16 in [16, 2048], got 4096");
  expect_error([](auto& o) { o.frames = 0; }, "video dataset: frames must be in [1, 1000], got 0");
  expect_error([](auto& o) { o.fps = 0; }, "video dataset: fps must be in (0, 120], got 0");
  expect_error([](auto& o) { o.train = -1; }, "video dataset: train must be >= 0, got -1");
  expect_error([](auto& o) { o.train = 0, o.test = 0; }, "train + test must be > 0");
  EXPECT_FALSE(fs::exists(dir / "x"));
  std::ofstream(dir / "file") << "not a directory";
  EXPECT_THROW_MSG(mm::write_video_dataset(dir / "file", small_options()), "file: exists and is not a directory");
}

TEST(DataSynthVideoCommand, WritesWhatTheLibraryWrites) {
  const auto dir = mm::testing::temp_dir("synth_video_cli");
  const auto [rc, out] = run_command(kMmtrain + " data synth --kind video --out " + (dir / "cli").string() +
                                     " --train 4 --test 2 --frames 5 --width 32 --height 48 --fps 10 --seed 5");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("4 train and 2 test clips (5 frames of 32x48 at 10 fps, seed 5)"), std::string::npos) << out;
  mm::VideoSynthOptions o;
  o.train = 4;
  o.test = 2;
  o.frames = 5;
  o.width = 32;
  o.height = 48;
  o.fps = 10;
  o.seed = 5;
  mm::write_video_dataset(dir / "lib", o);
  EXPECT_EQ(file_tree(dir / "cli"), file_tree(dir / "lib"));
  EXPECT_DOUBLE_EQ(mm::decode_video(dir / "cli" / "videos" / "test" / "000001.mp4").fps, 10.0);
}

TEST(DataSynthVideoCommand, ClearErrors) {
  const auto dir = mm::testing::temp_dir("synth_video_cli_bad");
  const std::string synth = kMmtrain + " data synth --out " + (dir / "v").string() + " ";
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"--kind video --width 50", "mmtrain: error: video dataset: width must be a multiple of 16 in [16, 2048], got 50"},
           {"--kind video --height 24", "height must be a multiple of 16 in [16, 2048], got 24"},
           {"--kind video --frames 0", "mmtrain: error: video dataset: frames must be in [1, 1000], got 0"},
           {"--kind video --image-size 56", "mmtrain: error: data synth: --image-size does not apply to --kind video"},
           {"--kind shapes --frames 9", "mmtrain: error: data synth: --frames does not apply to --kind shapes"},
       }) {
    const auto [rc, out] = run_command(synth + args);
    EXPECT_EQ(rc, 1) << args << "\n" << out;
    EXPECT_NE(out.find(message), std::string::npos) << args << "\n" << out;
    EXPECT_FALSE(fs::exists(dir / "v")) << args;
  }
  {  // an unknown kind is a usage error (exit 2)
    const auto [rc, out] = run_command(synth + "--kind audio");
    EXPECT_EQ(rc, 2) << out;
    EXPECT_NE(out.find("mmtrain: error: --kind: audio not in {shapes,video}"), std::string::npos) << out;
    EXPECT_FALSE(fs::exists(dir / "v"));
  }
  const auto [rc, out] = run_command(kMmtrain + " data synth --kind video --out " + (dir / "w").string() +
                                     " --width abc");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_FALSE(fs::exists(dir / "w"));
}
