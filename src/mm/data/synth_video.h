// The synthetic "moving shapes" text-to-video dataset: short clips of one saturated coloured
// shape moving across, or growing or shrinking on, a plain light grey background, each with a
// caption saying what happens ("a red circle moving from left to right"). Made for smoke-testing
// video generation end to end: a tiny text-to-video model trained on it from scratch learns
// colour, shape and motion from the caption quickly, so samples that follow their prompts show
// the whole stack (text encoder, VAE, predictor, scheduler, training, sampling) works.
//
// Layout written under out_dir:
//   videos/train/000000.mp4 ...   videos/test/000000.mp4 ...   (see write_video: H.264 yuv420p
//                                 with libx264, crf 12, else mpeg4; width x height, fps)
//   train.jsonl, test.jsonl       one clip per line, paths relative to out_dir:
//     {"path": "videos/train/000000.mp4", "caption": "a red circle moving from left to right"}
//   README.txt                    what the data is and how it was made
//
// Captions are "a <colour> <shape> <motion>": colour one of synth_video_colours() (the palette
// of the shapes dataset), shape circle | square | triangle, motion one of synth_video_motions().
// The shape stays wholly inside the frame; it moves linearly from its first to its last frame
// (across at least a third of the frame) or its size changes linearly (between 6-10% and 26-32%
// of the smaller side, as a radius). Everything is drawn with integer arithmetic from splitmix64
// streams keyed by (seed, split, index): the same options give the same pixels on every machine,
// and no clip appears twice in or across the splits. The mp4 bytes are the same too with the
// same FFmpeg/x264 build (see write_video).
#pragma once
#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace mm {

struct VideoSynthOptions {
  int64_t train = 200;  // clips (and records) in train.jsonl
  int64_t test = 20;    // clips in test.jsonl
  // Frames per clip. Any count >= 1; Wan's VAE takes 1 + 4k frames (17 -> 5 latent frames).
  int64_t frames = 17;
  int64_t width = 64;   // pixels; multiples of 16 (Wan: VAE stride 8 x patch 2) in [16, 2048]
  int64_t height = 64;
  double fps = 8;
  uint64_t seed = 0;

  // Throws mm::Error naming the field (negative counts, frames out of [1, 1000], a size that is
  // not a multiple of 16 or out of range, fps out of (0, 120]).
  void validate() const;
};

struct SynthColour {
  std::string name;
  std::array<uint8_t, 3> rgb;
};

// The vocabulary of the captions, for templates and tests.
const std::vector<SynthColour>& synth_video_colours();  // red, green, blue, yellow, purple, orange
const std::vector<std::string>& synth_video_motions();
// ^ "moving from left to right", "moving from right to left", "moving up", "moving down",
//   "growing", "shrinking"

// Writes the dataset (creating out_dir; files of an earlier run there are overwritten). Throws
// mm::Error naming out_dir when it is not a directory or cannot be written.
void write_video_dataset(const std::filesystem::path& out_dir, const VideoSynthOptions& options);

}  // namespace mm
