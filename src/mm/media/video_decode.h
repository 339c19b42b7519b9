// Video decoding with FFmpeg into RGB frames, selecting frames the way transformers 5.17's
// Qwen2VLVideoProcessor.sample_frames does.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace mm {

// Which frames to keep. Neither fps nor num_frames: every frame. They are mutually exclusive.
// Two rules, as the two reference video processors sample:
// Qwen2-VL (Qwen2VLVideoProcessor.sample_frames):
//  - num_frames: rounded to a multiple of temporal_patch_size (half to even, like Python's
//    round); min_frames / max_frames do not apply (as in the reference).
//  - fps: total_frames / video_fps * fps, clamped to [min_frames, min(max_frames, total)] with
//    max_frames first floored to a multiple of temporal_patch_size, then floored to a multiple
//    of temporal_patch_size.
//  The chosen count n gives indices int(float32(arange(0, total, total / n))).
// Qwen3-VL (Qwen3VLVideoProcessor.sample_frames):
//  - num_frames: taken as it is (more than the video has repeat frames, as there);
//  - fps: int(total_frames / video_fps * fps), clamped to min(max(n, min_frames), max_frames, total);
//  The chosen count n gives indices round(linspace(0, total - 1, n)) (half to even).
enum class FrameRule { qwen2_vl, qwen3_vl };

struct VideoSampling {
  std::optional<double> fps;
  std::optional<int64_t> num_frames;
  int64_t min_frames = 4;
  int64_t max_frames = 768;
  int64_t temporal_patch_size = 2;
  FrameRule rule = FrameRule::qwen2_vl;
};

// The frame indices `sampling` selects from a video of `total_frames` frames at `video_fps`.
// Throws mm::Error (naming `name`) when the selection is empty or exceeds the video.
std::vector<int64_t> sample_frame_indices(int64_t total_frames, double video_fps,
                                          const VideoSampling& sampling,
                                          const std::string& name = "video");

struct DecodedVideo {
  at::Tensor frames;               // uint8 [T, height, width, 3] RGB, the selected frames
  double fps = 0;                  // the source's average frame rate
  std::vector<double> timestamps;  // [T] seconds of each returned frame from the stream start
  int64_t total_frames = 0;        // frames in the source
  std::vector<int64_t> frame_indices;  // [T] index of each returned frame in the source
  // Frames per second of the returned frames (transformers' VideoMetadata.sampled_fps), the
  // value Qwen2.5-VL's second_per_grid_ts is derived from.
  double sampled_fps() const;
};

// Decodes the first video stream sequentially (no seeking): one demux pass counts the frames,
// a second decodes and keeps the selected ones, converted to RGB at the stream's size with its
// colour space and range. Throws mm::Error naming the file for a missing or unreadable file,
// a file without a video stream, a video without frames, or a selection it cannot satisfy.
DecodedVideo decode_video(const std::filesystem::path& path, const VideoSampling& sampling = {});

}  // namespace mm
