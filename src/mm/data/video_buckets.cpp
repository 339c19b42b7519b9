#include "mm/data/video_buckets.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "mm/core/error.h"

namespace mm {
namespace {

// floor(k * step) with a little slack, so 3 * (30 / 10) is 9 and not 8.999...
int64_t source_index(int64_t k, double step) {
  return static_cast<int64_t>(std::floor(static_cast<double>(k) * step + 1e-9));
}

double frame_step(double source_fps, const FrameSampling& sampling, const std::string& name) {
  if (!sampling.fps) return static_cast<double>(sampling.frame_interval);
  MM_CHECK(source_fps > 0, name, ": sampling at ", *sampling.fps,
           " fps needs the video's frame rate, which the file does not give");
  return source_fps / *sampling.fps;
}

}  // namespace

std::string to_string(const VideoBucket& b) { return str_cat(b.frames, "x", b.height, "x", b.width); }

void validate_bucket(const VideoBucket& b, const std::string& where) {
  MM_CHECK(b.frames >= 1 && b.frames % 4 == 1, where, ": frames must be 1 + 4k (the Wan VAE's), got ", b.frames);
  MM_CHECK(b.height >= 16 && b.height % 16 == 0, where, ": height must be a positive multiple of 16, got ", b.height);
  MM_CHECK(b.width >= 16 && b.width % 16 == 0, where, ": width must be a positive multiple of 16, got ", b.width);
}

std::vector<VideoBucket> make_buckets(int64_t pixels, const std::vector<double>& aspect_ratios,
                                      const std::vector<int64_t>& frame_counts) {
  std::vector<VideoBucket> out;
  auto to16 = [](double x) { return std::max<int64_t>(16, static_cast<int64_t>(std::nearbyint(x / 16)) * 16); };
  for (int64_t frames : frame_counts) {
    for (double ratio : aspect_ratios) {
      const double p = static_cast<double>(pixels);
      const VideoBucket b{frames, to16(std::sqrt(p / ratio)), to16(std::sqrt(p * ratio))};
      if (std::find(out.begin(), out.end(), b) == out.end()) out.push_back(b);
    }
  }
  return out;
}

int64_t fillable_frames(int64_t total_frames, double source_fps, const FrameSampling& sampling,
                        const std::string& name) {
  if (total_frames <= 0) return 0;
  const double step = frame_step(source_fps, sampling, name);
  int64_t n = static_cast<int64_t>(std::floor(static_cast<double>(total_frames - 1) / step)) + 1;
  while (n > 0 && source_index(n - 1, step) > total_frames - 1) --n;
  while (source_index(n, step) <= total_frames - 1) ++n;
  return n;
}

std::vector<int64_t> clip_frame_indices(int64_t total_frames, double source_fps, const FrameSampling& sampling,
                                        int64_t count, const std::string& name) {
  MM_CHECK(count >= 1, name, ": cannot sample ", count, " frames");
  const int64_t fillable = fillable_frames(total_frames, source_fps, sampling, name);
  MM_CHECK(count <= fillable, name, ": ", total_frames, " frames fill only ", fillable, " output frames, ",
           count, " were asked for");
  const double step = frame_step(source_fps, sampling, name);
  std::vector<int64_t> indices(count);
  for (int64_t k = 0; k < count; ++k) indices[k] = source_index(k, step);
  return indices;
}

std::optional<size_t> choose_bucket(const std::vector<VideoBucket>& buckets, int64_t width, int64_t height,
                                    int64_t fillable, const BucketRules& rules) {
  if (width <= 0 || height <= 0) return std::nullopt;
  const double log_aspect = std::log(static_cast<double>(width) / static_cast<double>(height));
  const double max_distance = rules.max_aspect_mismatch > 0 ? std::log(rules.max_aspect_mismatch) + 1e-12 : INFINITY;
  std::optional<size_t> best;
  double best_distance = INFINITY;
  for (size_t i = 0; i < buckets.size(); ++i) {
    const VideoBucket& b = buckets[i];
    if (b.frames > fillable) continue;
    if (!rules.allow_upscale && (b.height > height || b.width > width)) continue;
    const double distance = std::abs(std::log(b.aspect()) - log_aspect);
    if (distance > max_distance) continue;
    bool better = !best || distance < best_distance - 1e-12;
    if (best && !better && distance <= best_distance + 1e-12) {  // same aspect ratio
      const VideoBucket& o = buckets[*best];
      better = b.frames > o.frames || (b.frames == o.frames && b.height * b.width > o.height * o.width);
    }
    if (better) {
      best = i;
      best_distance = distance;
    }
  }
  return best;
}

CropWindow crop_window(int64_t height, int64_t width, const VideoBucket& bucket,
                       std::optional<uint64_t> random_seed) {
  MM_CHECK(height > 0 && width > 0, "crop_window: empty frame ", height, "x", width);
  const double scale = std::max(static_cast<double>(bucket.height) / static_cast<double>(height),
                                static_cast<double>(bucket.width) / static_cast<double>(width));
  CropWindow w;
  w.resized_height = std::max(bucket.height, static_cast<int64_t>(std::nearbyint(height * scale)));
  w.resized_width = std::max(bucket.width, static_cast<int64_t>(std::nearbyint(width * scale)));
  const int64_t spare_h = w.resized_height - bucket.height, spare_w = w.resized_width - bucket.width;
  if (random_seed) {
    std::mt19937_64 rng(*random_seed);
    // Modulo bias is at most spare / 2^64: irrelevant for crop offsets.
    w.top = static_cast<int64_t>(rng() % static_cast<uint64_t>(spare_h + 1));
    w.left = static_cast<int64_t>(rng() % static_cast<uint64_t>(spare_w + 1));
  } else {
    w.top = static_cast<int64_t>(std::nearbyint(static_cast<double>(spare_h) / 2));
    w.left = static_cast<int64_t>(std::nearbyint(static_cast<double>(spare_w) / 2));
  }
  return w;
}

at::Tensor resize_and_crop(const at::Tensor& rgb, const CropWindow& window, const VideoBucket& bucket) {
  MM_CHECK(rgb.dim() == 3 && rgb.size(2) == 3 && rgb.scalar_type() == torch::kByte,
           "resize_and_crop: expected uint8 [height, width, 3], got ", rgb.sizes(), " ", rgb.scalar_type());
  torch::Tensor x = rgb.permute({2, 0, 1}).unsqueeze(0).to(torch::kFloat);  // [1, 3, h, w]
  if (x.size(2) != window.resized_height || x.size(3) != window.resized_width) {
    namespace F = torch::nn::functional;
    x = F::interpolate(x, F::InterpolateFuncOptions()
                              .size(std::vector<int64_t>{window.resized_height, window.resized_width})
                              .mode(torch::kBilinear)
                              .align_corners(false)
                              .antialias(true));
  }
  x = x[0].slice(1, window.top, window.top + bucket.height).slice(2, window.left, window.left + bucket.width);
  return (x.clamp(0, 255) / 127.5 - 1).contiguous();
}

}  // namespace mm
