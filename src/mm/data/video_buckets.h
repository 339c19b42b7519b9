// Shape buckets for text-to-video training: which (frames, height, width) a clip is trained at,
// which source frames fill it, and how a frame is resized and cropped to the bucket.
//
// Frame sampling (DiffSynth-Studio's LoadVideo rule: the first `frames` frames from the start,
// at a fixed interval; extended with a target frame rate):
//   - step = source_fps / fps when a target fps is set, else frame_interval (default 1);
//   - output frame k shows source frame floor(k * step): the frame on screen at time k / fps
//     (sample and hold, so a target rate above the source's repeats frames);
//   - a clip can fill n frames where source frame floor((n - 1) * step) exists.
// An image is a one-frame clip.
//
// Bucket choice (choose_bucket): among the buckets whose frame count the clip can fill and whose
// size it reaches without upscaling (unless upscaling is allowed) and whose aspect ratio is
// within max_aspect_mismatch of the clip's, the nearest aspect ratio (|log(w/h) - log(W/H)|)
// wins; ties go to the most frames, then the most pixels, then the first listed.
//
// Resize and crop (DiffSynth-Studio's ImageCropAndResize): scale = max(H / h, W / w) so the frame
// covers the bucket, size (round(h * scale), round(w * scale)) (at least the bucket's), bilinear
// with antialiasing; then a crop of the bucket's size, centred like torchvision's center_crop
// (offset round((h' - H) / 2), half to even) or uniformly random.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mm {

struct VideoBucket {
  int64_t frames = 1;  // 1 + 4k: the Wan VAE's temporal compression (k latent frames after the first)
  int64_t height = 0, width = 0;  // multiples of 16 (VAE stride 8 times the DiT's 2x2 patches)

  double aspect() const { return static_cast<double>(width) / static_cast<double>(height); }
  bool operator==(const VideoBucket&) const = default;
};

std::string to_string(const VideoBucket& bucket);  // "81x480x832" (frames x height x width)

// Throws mm::Error naming `where` (e.g. "data.buckets[2]") unless frames = 1 + 4k >= 1 and height,
// width are positive multiples of 16.
void validate_bucket(const VideoBucket& bucket, const std::string& where);

// One bucket per (frame count, aspect ratio): height = round(sqrt(pixels / ratio) / 16) * 16,
// width = round(sqrt(pixels * ratio) / 16) * 16 (ratio = width / height), at least 16 each.
// Duplicates (ratios that round to the same size) are kept once; order: frames outer, ratios inner.
std::vector<VideoBucket> make_buckets(int64_t pixels, const std::vector<double>& aspect_ratios,
                                      const std::vector<int64_t>& frame_counts);

struct FrameSampling {
  std::optional<double> fps;   // target frame rate; needs the source's
  int64_t frame_interval = 1;  // used when fps is not set
};

// The number of output frames the clip can fill under `sampling` (1 for an image). Throws
// mm::Error naming `name` when a target fps is set and the source fps is unknown (<= 0).
int64_t fillable_frames(int64_t total_frames, double source_fps, const FrameSampling& sampling,
                        const std::string& name = "video");

// The `count` source frame indices (non-decreasing) of the header's rule. Throws mm::Error naming
// `name` when the clip cannot fill `count`.
std::vector<int64_t> clip_frame_indices(int64_t total_frames, double source_fps, const FrameSampling& sampling,
                                        int64_t count, const std::string& name = "video");

struct BucketRules {
  bool allow_upscale = true;
  // The largest ratio between the clip's and the bucket's aspect ratios (>= 1; 2.0 crops away at
  // most half of one side); 0: no limit.
  double max_aspect_mismatch = 0;
};

// Index into `buckets` of the header's choice for a width x height clip that can fill
// `fillable` frames, or nullopt when none qualifies.
std::optional<size_t> choose_bucket(const std::vector<VideoBucket>& buckets, int64_t width, int64_t height,
                                    int64_t fillable, const BucketRules& rules);

// Where the crop of one clip lies in its resized frames.
struct CropWindow {
  int64_t resized_height = 0, resized_width = 0;  // the covering size the frames are resized to
  int64_t top = 0, left = 0;                      // the crop's offset in the resized frame
};

// random_seed unset: the centred crop; set: a uniform offset drawn from it (the same for every
// frame of the clip, so motion is not jittered).
CropWindow crop_window(int64_t height, int64_t width, const VideoBucket& bucket,
                       std::optional<uint64_t> random_seed = std::nullopt);

// Resizes uint8 [height, width, 3] RGB to the window's covering size, crops the bucket's
// height x width and returns float [3, bucket.height, bucket.width] in [-1, 1] (x / 127.5 - 1).
at::Tensor resize_and_crop(const at::Tensor& rgb, const CropWindow& window, const VideoBucket& bucket);

}  // namespace mm
