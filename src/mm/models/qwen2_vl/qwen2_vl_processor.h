// Qwen2-VL / Qwen2.5-VL / Qwen3-VL image and video preprocessing, equal to what transformers 5.17
// gives by default: AutoImageProcessor -> Qwen2VLImageProcessor (torchvision backend) and
// AutoVideoProcessor -> Qwen2VLVideoProcessor (Qwen2_5_VLProcessor) or Qwen3VLVideoProcessor
// (Qwen3VLProcessor: other frame sampling, a pixel budget over the whole clip, and per-frame
// timestamps in the text). Same ATen ops in the same order and dtypes (uint8 antialiased bicubic
// resize, float32 fused rescale+normalize), so outputs match the reference to float rounding.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "mm/media/video_decode.h"

namespace mm {

namespace qwen2_vl {

// Target (height, width): multiples of `factor`, area within [min_pixels, max_pixels], aspect
// ratio kept as closely as possible. Throws mm::Error for an aspect ratio above 200 (as the
// reference raises) and for an empty size. Tiny images are scaled up to min_pixels.
std::pair<int64_t, int64_t> smart_resize(int64_t height, int64_t width, int64_t factor = 28,
                                         int64_t min_pixels = 56 * 56,
                                         int64_t max_pixels = 14 * 14 * 4 * 1280);

}  // namespace qwen2_vl

namespace qwen3_vl {

// Qwen3VLVideoProcessor's target (height, width) for `num_frames` frames of height x width:
// multiples of `factor` whose t_bar * h * w (t_bar = num_frames rounded to temporal_factor) lies
// within [min_pixels, max_pixels]; frames smaller than `factor` are first scaled up. Throws
// mm::Error as the reference raises: fewer frames than temporal_factor, aspect ratio above 200.
std::pair<int64_t, int64_t> smart_resize(int64_t num_frames, int64_t height, int64_t width, int64_t temporal_factor,
                                         int64_t factor, int64_t min_pixels, int64_t max_pixels);

// Qwen3VLProcessor._calculate_timestamps: the seconds of each temporal patch, the mean of its
// first and last frame's index / fps, the indices padded to a multiple of temporal_patch_size
// by repeating the last.
std::vector<double> grid_timestamps(std::vector<int64_t> frame_indices, double fps, int64_t temporal_patch_size);

}  // namespace qwen3_vl

enum class VideoProcessorKind { qwen2_vl, qwen3_vl };

// One preprocessor config (images or videos). Defaults are transformers 5.17's class defaults;
// the video defaults differ in min/max_pixels (see video_defaults()).
struct Qwen2VLPreprocessConfig {
  bool do_resize = true;
  int64_t min_pixels = 56 * 56;         // size.shortest_edge
  int64_t max_pixels = 28 * 28 * 1280;  // size.longest_edge
  int64_t patch_size = 14;
  int64_t temporal_patch_size = 2;
  int64_t merge_size = 2;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255;
  bool do_normalize = true;
  std::vector<double> image_mean = {0.48145466, 0.4578275, 0.40821073};  // OpenAI CLIP
  std::vector<double> image_std = {0.26862954, 0.26130258, 0.27577711};
  // Inputs here are always RGB already (our decoders convert), so this is kept for reference.
  bool do_convert_rgb = true;
  // Videos only: frame sampling when decoding (see video_sampling()) and the optional total
  // pixel budget of Qwen2VLVideoProcessor.cap_pixels_per_frame.
  bool do_sample_frames = false;
  std::optional<double> fps;
  std::optional<int64_t> num_frames;
  int64_t min_frames = 4;
  int64_t max_frames = 768;
  bool cap_pixels_per_frame = false;
  int64_t max_video_tokens = 128000;
  // Videos only: which reference video processor this config is for.
  VideoProcessorKind video_kind = VideoProcessorKind::qwen2_vl;

  static Qwen2VLPreprocessConfig image_defaults() { return {}; }
  // The class defaults of the kind's video processor (Qwen3VLVideoProcessor samples 2 fps by
  // default, with 16-pixel patches, a 0.5 mean and std and its own pixel budget).
  static Qwen2VLPreprocessConfig video_defaults(VideoProcessorKind kind = VideoProcessorKind::qwen2_vl);

  // Reads a preprocessor_config.json / video_preprocessor_config.json object over `defaults`
  // the way the reference's __init__ does: size.{shortest_edge,longest_edge}, overridden by
  // top-level min_pixels / max_pixels. Unknown keys are ignored; errors name file and key.
  static Qwen2VLPreprocessConfig parse(const nlohmann::json& json, const std::string& file,
                                       const Qwen2VLPreprocessConfig& defaults);
  void validate(const std::string& file) const;

  // The frame selection for decode_video (all frames unless do_sample_frames).
  VideoSampling video_sampling() const;
};

struct VisionInputs {
  at::Tensor pixel_values;  // float32 [num_patches, C * temporal_patch_size * patch * patch]
  at::Tensor grid_thw;      // int64 [num_items, 3]: (t, h, w) in patches, per image/video
};

struct VideoInputs : VisionInputs {
  // [num_videos] seconds per temporal patch: temporal_patch_size / sampled fps.
  std::vector<double> second_per_grid_ts;
  // Qwen3-VL: [num_videos][grid t] the seconds of each temporal patch, written before its frame
  // in the text (empty for Qwen2-VL's processor).
  std::vector<std::vector<double>> timestamps;
};

// Where the given frames of a video came from (transformers' VideoMetadata): the frame rate of
// the frames given (Qwen2.5-VL's second_per_grid_ts), and the source's rate and each frame's
// index in the source (Qwen3-VL's timestamps). Unknown, the reference assumes 24 fps and
// indices 0, 1, 2, ...
struct VideoFrameTimes {
  double sampled_fps = 24.0;
  double source_fps = 24.0;
  std::vector<int64_t> frame_indices;  // empty: 0 .. T-1
};
VideoFrameTimes frame_times_of(const DecodedVideo& video);

class Qwen2VLProcessor {
 public:
  explicit Qwen2VLProcessor(Qwen2VLPreprocessConfig image = Qwen2VLPreprocessConfig::image_defaults(),
                            Qwen2VLPreprocessConfig video = Qwen2VLPreprocessConfig::video_defaults());

  // From a model directory, with transformers' file priority: the "image_processor" /
  // "video_processor" object of processor_config.json, then video_preprocessor_config.json (video
  // only), then preprocessor_config.json. A missing image config is an error; a missing video
  // config falls back to the video defaults.
  static Qwen2VLProcessor from_pretrained(const std::filesystem::path& model_dir);

  const Qwen2VLPreprocessConfig& image_config() const { return image_; }
  const Qwen2VLPreprocessConfig& video_config() const { return video_; }

  // images: each uint8 [H, W, 3] RGB. Each image becomes temporal_patch_size identical frames.
  VisionInputs preprocess_images(const std::vector<at::Tensor>& images) const;

  // videos: each uint8 [T, H, W, 3] RGB; T is padded to a multiple of temporal_patch_size by
  // repeating the last frame. times: per video where its frames came from (frame_times_of a
  // DecodedVideo); empty means unknown, for which the reference assumes 24 fps.
  VideoInputs preprocess_videos(const std::vector<at::Tensor>& videos,
                                const std::vector<VideoFrameTimes>& times = {}) const;

  // The text with each image / video placeholder replaced by its tokens, as this model's
  // processor does: expand_vision_placeholders, or for Qwen3-VL's video processor
  // expand_vision_placeholders_with_timestamps with `video_timestamps` (VideoInputs::timestamps
  // of the videos in the text, in order).
  std::string expand_placeholders(const std::string& text, const at::Tensor& image_grid_thw,
                                  const at::Tensor& video_grid_thw,
                                  const std::vector<std::vector<double>>& video_timestamps,
                                  const std::string& image_token = "<|image_pad|>",
                                  const std::string& video_token = "<|video_pad|>") const;

 private:
  Qwen2VLPreprocessConfig image_;
  Qwen2VLPreprocessConfig video_;
};

// Replaces each image / video placeholder in `text`, in order, by grid_thw[i].prod() /
// merge_size^2 copies of itself, as Qwen2_5_VLProcessor.__call__ does. Throws mm::Error when the
// number of placeholders differs from the number of grids.
//   image_grid_thw, video_grid_thw: int64 [num_items, 3] (undefined tensors mean none).
std::string expand_vision_placeholders(const std::string& text, const at::Tensor& image_grid_thw,
                                       const at::Tensor& video_grid_thw, int64_t merge_size,
                                       const std::string& image_token = "<|image_pad|>",
                                       const std::string& video_token = "<|video_pad|>");

// Qwen3VLProcessor's expansion: images as above; each video placeholder becomes, per temporal
// patch k, "<{timestamps[k]:.1f} seconds>" + vision_start + frame tokens + vision_end (the
// reference keeps the template's own vision_start/vision_end around the whole). Throws mm::Error
// when the counts of placeholders, grids and timestamps differ.
std::string expand_vision_placeholders_with_timestamps(
    const std::string& text, const at::Tensor& image_grid_thw, const at::Tensor& video_grid_thw, int64_t merge_size,
    const std::vector<std::vector<double>>& video_timestamps, const std::string& image_token = "<|image_pad|>",
    const std::string& video_token = "<|video_pad|>", const std::string& vision_start = "<|vision_start|>",
    const std::string& vision_end = "<|vision_end|>");

}  // namespace mm
