#include "mm/data/synth_video.h"

#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "mm/core/error.h"
#include "mm/core/log.h"
#include "mm/core/progress.h"
#include "mm/core/safetensors.h"
#include "mm/data/synth_common.h"
#include "mm/data/synth_shapes.h"
#include "mm/media/video_encode.h"

namespace mm {
namespace {

using synth::SplitMix64;

// Sub-pixel units: positions and sizes move smoothly although the arithmetic is integer (floating
// point may be contracted differently by other compilers; integers give the same pixels anywhere).
constexpr int64_t kSub = 16;
// Quality of the stored clips: near-lossless, so a model learns the shapes, not the artifacts.
constexpr int kCrf = 12;

enum Motion { kLeftToRight, kRightToLeft, kUp, kDown, kGrowing, kShrinking, kMotions };

struct Clip {
  int colour = 0, kind = 0, motion = 0;
  std::vector<uint8_t> pixels;  // [frames, height, width, 3]
};

// Draws one clip from its own stream, so any record can be regenerated alone.
Clip draw(uint64_t key, const VideoSynthOptions& o) {
  SplitMix64 rng{key};
  Clip clip;
  clip.colour = static_cast<int>(rng.below(static_cast<int64_t>(synth_video_colours().size())));
  clip.kind = static_cast<int>(rng.below(static_cast<int64_t>(shapes_kinds().size())));
  clip.motion = static_cast<int>(rng.below(kMotions));
  const int64_t background = rng.between(215, 245);

  // Centre (cx, cy) and radius r at the first (0) and last (1) frame, in sub-pixels.
  const int64_t w = o.width * kSub, h = o.height * kSub, side = std::min(w, h);
  int64_t cx0 = 0, cy0 = 0, r0 = 0, cx1 = 0, cy1 = 0, r1 = 0;
  if (clip.motion <= kDown) {
    r0 = r1 = rng.between(side * 14 / 100, side * 20 / 100);
    // Start within an eighth of the frame from one edge, end within an eighth from the other.
    auto travel = [&](int64_t length, int64_t* from, int64_t* to) {
      *from = rng.between(r0, r0 + length / 8);
      *to = rng.between(length - r0 - length / 8, length - r0);
    };
    auto across = [&](int64_t length) { return rng.between(r0, length - r0); };
    switch (clip.motion) {
      case kLeftToRight: travel(w, &cx0, &cx1), cy0 = cy1 = across(h); break;
      case kRightToLeft: travel(w, &cx1, &cx0), cy0 = cy1 = across(h); break;
      case kUp: travel(h, &cy1, &cy0), cx0 = cx1 = across(w); break;
      default: travel(h, &cy0, &cy1), cx0 = cx1 = across(w); break;
    }
  } else {
    const int64_t small = rng.between(side * 6 / 100, side * 10 / 100);
    const int64_t big = rng.between(side * 26 / 100, side * 32 / 100);
    cx0 = cx1 = rng.between(big, w - big);
    cy0 = cy1 = rng.between(big, h - big);
    r0 = clip.motion == kGrowing ? small : big;
    r1 = clip.motion == kGrowing ? big : small;
  }

  const auto& rgb = synth_video_colours()[clip.colour].rgb;
  clip.pixels.resize(static_cast<size_t>(o.frames * o.height * o.width * 3));
  uint8_t* p = clip.pixels.data();
  for (int64_t t = 0; t < o.frames; ++t) {
    auto lerp = [&](int64_t a, int64_t b) { return o.frames == 1 ? a : a + (b - a) * t / (o.frames - 1); };
    const int64_t cx = lerp(cx0, cx1), cy = lerp(cy0, cy1), r = lerp(r0, r1);
    for (int64_t y = 0; y < o.height; ++y) {
      for (int64_t x = 0; x < o.width; ++x, p += 3) {
        const int64_t dx = x * kSub + kSub / 2 - cx, dy = y * kSub + kSub / 2 - cy;
        bool inside = false;
        switch (clip.kind) {
          case 0: inside = dx * dx + dy * dy <= r * r; break;
          case 1: inside = std::abs(dx) <= r * 4 / 5 && std::abs(dy) <= r * 4 / 5; break;
          default:  // upward triangle, apex at cy - r, base at cy + r, base width 2 r
            inside = dy >= -r && dy <= r && 2 * std::abs(dx) <= dy + r;
        }
        if (inside) {
          p[0] = rgb[0], p[1] = rgb[1], p[2] = rgb[2];
        } else {
          p[0] = p[1] = p[2] = static_cast<uint8_t>(background);
        }
      }
    }
  }
  return clip;
}

std::string readme(const VideoSynthOptions& o, const WrittenVideo& written) {
  return str_cat(
      "Synthetic moving-shapes video dataset, written by `mmtrain data synth --kind video`.\n\n",
      "Options: train=", o.train, " test=", o.test, " frames=", o.frames, " width=", o.width,
      " height=", o.height, " fps=", o.fps, " seed=", o.seed, "\n",
      "Videos: ", written.codec, " (", written.encoder, ", crf ", kCrf, "), yuv420p, BT.601 limited range.\n",
      "The same options give the same pixels on every machine and the same bytes with the same\n",
      "FFmpeg/x264 build (another build may encode the same pixels into other bytes).\n\n",
      "Each clip is ", o.frames, " frames of ", o.width, "x", o.height, " at ", o.fps,
      " fps: one saturated shape (circle, square, triangle) coloured red, green, blue, yellow,\n",
      "purple or orange on a plain light grey background, moving from left to right, from right\n",
      "to left, up or down (across at least a third of the frame), or growing or shrinking, always\n",
      "wholly inside the frame. No clip appears twice within or across the splits.\n\n",
      "train.jsonl / test.jsonl hold one clip per line, paths relative to this directory:\n",
      "  {\"path\": \"videos/train/000000.mp4\", \"caption\": \"a red circle moving from left to right\"}\n",
      "Captions are \"a <colour> <shape> <motion>\", motion one of: moving from left to right,\n",
      "moving from right to left, moving up, moving down, growing, shrinking.\n");
}

}  // namespace

void VideoSynthOptions::validate() const {
  MM_CHECK(train >= 0, "video dataset: train must be >= 0, got ", train);
  MM_CHECK(test >= 0, "video dataset: test must be >= 0, got ", test);
  MM_CHECK(train + test > 0, "video dataset: train + test must be > 0");
  MM_CHECK(train <= 999999 && test <= 999999, "video dataset: at most 999999 clips per split");
  MM_CHECK(frames >= 1 && frames <= 1000, "video dataset: frames must be in [1, 1000], got ", frames);
  for (const auto& [field, value] : {std::pair{"width", width}, std::pair{"height", height}}) {
    MM_CHECK(value % 16 == 0 && value >= 16 && value <= 2048, "video dataset: ", field,
             " must be a multiple of 16 in [16, 2048], got ", value);
  }
  MM_CHECK(std::isfinite(fps) && fps > 0 && fps <= 120, "video dataset: fps must be in (0, 120], got ", fps);
}

const std::vector<SynthColour>& synth_video_colours() {
  // The shapes dataset's palette (well separated, saturated), so both datasets share colour words.
  static const std::vector<SynthColour> colours{{"red", {220, 20, 20}},     {"green", {20, 170, 40}},
                                                {"blue", {25, 60, 225}},    {"yellow", {240, 220, 10}},
                                                {"purple", {140, 30, 170}}, {"orange", {255, 120, 0}}};
  return colours;
}

const std::vector<std::string>& synth_video_motions() {
  static const std::vector<std::string> motions{"moving from left to right", "moving from right to left",
                                                "moving up", "moving down", "growing", "shrinking"};
  return motions;
}

void write_video_dataset(const std::filesystem::path& out_dir, const VideoSynthOptions& options) {
  options.validate();
  namespace fs = std::filesystem;
  std::error_code ec;
  MM_CHECK(!fs::exists(out_dir, ec) || fs::is_directory(out_dir, ec), out_dir.string(),
           ": exists and is not a directory");
  for (const char* split : {"train", "test"}) {
    fs::create_directories(out_dir / "videos" / split, ec);
    MM_CHECK(!ec, out_dir.string(), ": cannot create videos/", split, ": ", ec.message());
  }

  VideoEncodeOptions encode;
  encode.fps = options.fps;
  encode.crf = kCrf;
  WrittenVideo written;
  std::unordered_set<uint64_t> seen;  // pixel hashes over both splits
  int64_t redraws = 0;
  ProgressBar bar(options.train + options.test, "synth video");
  int64_t done = 0;
  for (const auto& [split, count, tag] : {std::tuple{"train", options.train, 1ull},
                                          std::tuple{"test", options.test, 2ull}}) {
    std::string jsonl;
    for (int64_t i = 0; i < count; ++i) {
      // Hashed, not xor-ed, together: seeds that differ in any bit share no clip streams.
      SplitMix64 keys{SplitMix64{SplitMix64{options.seed}.next() + tag}.next() + static_cast<uint64_t>(i)};
      Clip clip;
      for (;;) {
        clip = draw(keys.next(), options);
        if (seen.insert(synth::fnv1a(clip.pixels)).second) break;
        ++redraws;
      }
      const std::string video = str_cat("videos/", split, "/", synth::record_id(i), ".mp4");
      auto frames = torch::from_blob(clip.pixels.data(), {options.frames, options.height, options.width, 3},
                                     torch::kUInt8);
      written = write_video(out_dir / video, frames, encode);

      nlohmann::ordered_json record;
      record["path"] = video;
      record["caption"] = str_cat("a ", synth_video_colours()[clip.colour].name, " ",
                                  shapes_kinds()[clip.kind], " ", synth_video_motions()[clip.motion]);
      jsonl += record.dump() + "\n";
      bar.update(++done);
    }
    write_file_atomic(out_dir / str_cat(split, ".jsonl"), jsonl);
  }
  bar.finish();
  write_file_atomic(out_dir / "README.txt", readme(options, written));
  if (redraws > 0) log::debug("video dataset: redrew ", redraws, " duplicate clips");
}

}  // namespace mm
