// Qwen2-VL preprocessing: the same ATen ops, in the same order and dtypes, as transformers 5.17's
// Qwen2VLImageProcessor / Qwen2VLVideoProcessor on CPU (torchvision backend), so results agree
// with the reference bit for bit or to float rounding.
#include "mm/models/qwen2_vl/qwen2_vl_processor.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "mm/core/error.h"
#include "mm/media/image_normalize.h"

namespace mm {

namespace qwen2_vl {

std::pair<int64_t, int64_t> smart_resize(int64_t height, int64_t width, int64_t factor,
                                         int64_t min_pixels, int64_t max_pixels) {
  MM_CHECK(height > 0 && width > 0, "smart_resize: empty image size ", height, "x", width);
  MM_CHECK(factor > 0 && max_pixels > 0, "smart_resize: factor and max_pixels must be positive");
  const double ratio = static_cast<double>(std::max(height, width)) /
                       static_cast<double>(std::min(height, width));
  MM_CHECK(!(ratio > 200), "absolute aspect ratio must be smaller than 200, got ", ratio,
           " (image ", height, "x", width, ")");
  const double f = static_cast<double>(factor);
  // Python's round() rounds half to even, as nearbyint does in the default rounding mode.
  int64_t h_bar = static_cast<int64_t>(std::nearbyint(height / f)) * factor;
  int64_t w_bar = static_cast<int64_t>(std::nearbyint(width / f)) * factor;
  const double area = static_cast<double>(height * width);
  if (h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt(area / static_cast<double>(max_pixels));
    h_bar = std::max(factor, static_cast<int64_t>(std::floor(height / beta / f)) * factor);
    w_bar = std::max(factor, static_cast<int64_t>(std::floor(width / beta / f)) * factor);
  } else if (h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / area);
    h_bar = static_cast<int64_t>(std::ceil(height * beta / f)) * factor;
    w_bar = static_cast<int64_t>(std::ceil(width * beta / f)) * factor;
  }
  return {h_bar, w_bar};
}

}  // namespace qwen2_vl

namespace qwen3_vl {

std::pair<int64_t, int64_t> smart_resize(int64_t num_frames, int64_t height, int64_t width, int64_t temporal_factor,
                                         int64_t factor, int64_t min_pixels, int64_t max_pixels) {
  MM_CHECK(height > 0 && width > 0, "smart_resize: empty frame size ", height, "x", width);
  MM_CHECK(factor > 0 && temporal_factor > 0 && max_pixels > 0,
           "smart_resize: factor, temporal_factor and max_pixels must be positive");
  MM_CHECK(num_frames >= temporal_factor, "t:", num_frames, " must be larger than temporal_factor:", temporal_factor,
           " (a video needs at least temporal_patch_size frames)");
  const double f = static_cast<double>(factor);
  if (height < factor || width < factor) {  // scaled up until the shorter side is one factor
    const double scale = std::max(f / static_cast<double>(height), f / static_cast<double>(width));
    height = static_cast<int64_t>(static_cast<double>(height) * scale);
    width = static_cast<int64_t>(static_cast<double>(width) * scale);
  }
  const double ratio =
      static_cast<double>(std::max(height, width)) / static_cast<double>(std::min(height, width));
  MM_CHECK(!(ratio > 200), "absolute aspect ratio must be smaller than 200, got ", ratio, " (frames ", height, "x",
           width, ")");
  // Python's round() rounds half to even, as nearbyint does in the default rounding mode.
  int64_t h_bar = static_cast<int64_t>(std::nearbyint(static_cast<double>(height) / f)) * factor;
  int64_t w_bar = static_cast<int64_t>(std::nearbyint(static_cast<double>(width) / f)) * factor;
  const int64_t t_bar = static_cast<int64_t>(std::nearbyint(static_cast<double>(num_frames) /
                                                            static_cast<double>(temporal_factor))) *
                        temporal_factor;
  const double volume = static_cast<double>(num_frames * height * width);
  if (t_bar * h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt(volume / static_cast<double>(max_pixels));
    h_bar = std::max(factor, static_cast<int64_t>(std::floor(static_cast<double>(height) / beta / f)) * factor);
    w_bar = std::max(factor, static_cast<int64_t>(std::floor(static_cast<double>(width) / beta / f)) * factor);
  } else if (t_bar * h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / volume);
    h_bar = static_cast<int64_t>(std::ceil(static_cast<double>(height) * beta / f)) * factor;
    w_bar = static_cast<int64_t>(std::ceil(static_cast<double>(width) * beta / f)) * factor;
  }
  return {h_bar, w_bar};
}

std::vector<double> grid_timestamps(std::vector<int64_t> frame_indices, double fps, int64_t temporal_patch_size) {
  MM_CHECK(fps > 0, "video timestamps: fps must be positive, got ", fps);
  MM_CHECK(temporal_patch_size > 0 && !frame_indices.empty(), "video timestamps: no frames");
  while (frame_indices.size() % static_cast<size_t>(temporal_patch_size) != 0)
    frame_indices.push_back(frame_indices.back());
  std::vector<double> out;
  for (size_t i = 0; i < frame_indices.size(); i += static_cast<size_t>(temporal_patch_size)) {
    const double first = static_cast<double>(frame_indices[i]) / fps;
    const double last = static_cast<double>(frame_indices[i + static_cast<size_t>(temporal_patch_size) - 1]) / fps;
    out.push_back((first + last) / 2);
  }
  return out;
}

}  // namespace qwen3_vl

VideoFrameTimes frame_times_of(const DecodedVideo& video) {
  return {video.sampled_fps(), video.fps > 0 ? video.fps : 24.0, video.frame_indices};
}

namespace {

// torchvision.transforms.v2.functional.resize_image, BICUBIC with antialias on a CPU uint8
// batch [N, C, H, W]: ATen's native uint8 kernel, no float round trip.
at::Tensor resize_bicubic(at::Tensor images, int64_t height, int64_t width) {
  if (images.size(2) == height && images.size(3) == width) return images;
  // torchvision restrides a single channels-last image so ATen keeps channels-last for the
  // output; the kernel path (and so the rounding) may depend on it, so do the same.
  if (images.is_contiguous(at::MemoryFormat::ChannelsLast) && images.size(0) == 1 &&
      images.numel() != images.stride(0)) {
    auto strides = images.strides().vec();
    strides[0] = images.numel();
    images = images.as_strided(images.sizes(), strides);
  }
  return at::_upsample_bicubic2d_aa(images, {height, width}, /*align_corners=*/false,
                                    std::nullopt, std::nullopt);
}

RescaleNormalize rescale_normalize_steps(const Qwen2VLPreprocessConfig& c) {
  return {c.do_rescale, c.rescale_factor, c.do_normalize, c.image_mean, c.image_std};
}

void check_rgb(const at::Tensor& t, int64_t dims, const std::string& what) {
  MM_CHECK(t.defined() && t.dim() == dims && t.size(-1) == 3 && t.scalar_type() == at::kByte,
           what, ": expected uint8 [", dims == 3 ? "H, W" : "T, H, W", ", 3] RGB, got ",
           t.defined() ? c10::toString(t.scalar_type()) : "undefined", " ",
           t.defined() ? t.sizes() : at::IntArrayRef{});
  MM_CHECK(t.size(-2) > 0 && t.size(-3) > 0, what, ": empty image size ", t.sizes());
}

// Target size of one image / video frame, or its own size without do_resize (then it must
// already be a multiple of patch_size * merge_size).
std::pair<int64_t, int64_t> target_size(int64_t height, int64_t width, int64_t max_pixels,
                                        const Qwen2VLPreprocessConfig& c,
                                        const std::string& what) {
  const int64_t factor = c.patch_size * c.merge_size;
  if (c.do_resize) {
    try {
      return qwen2_vl::smart_resize(height, width, factor, c.min_pixels, max_pixels);
    } catch (const Error& e) {
      fail(what, ": ", e.what());
    }
  }
  MM_CHECK(height % factor == 0 && width % factor == 0, what, ": size ", height, "x", width,
           " is not a multiple of patch_size * merge_size = ", factor, " and do_resize is false");
  return {height, width};
}

}  // namespace

Qwen2VLProcessor::Qwen2VLProcessor(Qwen2VLPreprocessConfig image, Qwen2VLPreprocessConfig video)
    : image_(std::move(image)), video_(std::move(video)) {
  image_.validate("image processor config");
  video_.validate("video processor config");
}

VisionInputs Qwen2VLProcessor::preprocess_images(const std::vector<at::Tensor>& images) const {
  MM_CHECK(!images.empty(), "preprocess_images: no images given");
  const auto& c = image_;
  const int64_t P = c.patch_size, m = c.merge_size, T = c.temporal_patch_size;
  std::vector<at::Tensor> patches;
  std::vector<int64_t> grids;
  for (size_t i = 0; i < images.size(); ++i) {
    const std::string what = str_cat("image ", i);
    check_rgb(images[i], 3, what);
    // [H, W, C] -> [1, C, H, W] as a view, as PIL -> pil_to_tensor -> unsqueeze(0) gives.
    at::Tensor x = images[i].permute({2, 0, 1}).unsqueeze(0);
    const auto [h, w] = target_size(x.size(2), x.size(3), c.max_pixels, c, what);
    x = rescale_and_normalize(resize_bicubic(x, h, w), rescale_normalize_steps(c));
    const int64_t C = x.size(1), gh = h / P, gw = w / P;
    // [1, gh/m, gw/m, m, m, C, P, P], then every pixel repeated over T identical frames.
    x = x.reshape({1, C, gh / m, m, P, gw / m, m, P}).permute({0, 2, 5, 3, 6, 1, 4, 7});
    patches.push_back(x.unsqueeze(6)
                          .expand({-1, -1, -1, -1, -1, -1, T, -1, -1})
                          .reshape({gh * gw, C * T * P * P}));
    grids.insert(grids.end(), {1, gh, gw});
  }
  return {torch::cat(patches, 0),
          torch::tensor(grids, torch::kLong).reshape({static_cast<int64_t>(images.size()), 3})};
}

VideoInputs Qwen2VLProcessor::preprocess_videos(const std::vector<at::Tensor>& videos,
                                                const std::vector<VideoFrameTimes>& times) const {
  MM_CHECK(!videos.empty(), "preprocess_videos: no videos given");
  MM_CHECK(times.empty() || times.size() == videos.size(), "preprocess_videos: ", times.size(),
           " frame timings given for ", videos.size(), " videos");
  const bool qwen3 = video_.video_kind == VideoProcessorKind::qwen3_vl;
  const auto& c = video_;
  const int64_t P = c.patch_size, m = c.merge_size, tps = c.temporal_patch_size;
  VideoInputs out;
  std::vector<at::Tensor> patches;
  std::vector<int64_t> grids;
  for (size_t i = 0; i < videos.size(); ++i) {
    const std::string what = str_cat("video ", i);
    check_rgb(videos[i], 4, what);
    MM_CHECK(videos[i].size(0) > 0, what, ": has no frames");
    // [T, H, W, C] -> contiguous [1, T, C, H, W], as the reference lays out array videos.
    at::Tensor x = videos[i].permute({0, 3, 1, 2}).contiguous().unsqueeze(0);
    const int64_t frames = x.size(1), C = x.size(2);
    int64_t max_pixels = c.max_pixels;
    const int64_t factor = P * m;
    std::pair<int64_t, int64_t> size;
    if (!qwen3) {
      if (c.cap_pixels_per_frame) {  // an even share of the whole video's pixel budget
        const auto total_pixels = static_cast<int64_t>(static_cast<double>(c.max_video_tokens * factor * factor) * 0.9);
        max_pixels = std::max(std::min(max_pixels, total_pixels * tps / frames),
                              static_cast<int64_t>(static_cast<double>(c.min_pixels) * 1.05));
      }
      size = target_size(x.size(3), x.size(4), max_pixels, c, what);
    } else {
      // Qwen3VLVideoProcessor: the budget covers the whole clip; capped, each frame gets at most
      // max_video_tokens patches or its even share, and at least 1.05 x the minimum.
      if (c.cap_pixels_per_frame) {
        const int64_t per_frame = std::max(std::min(c.max_video_tokens * factor * factor, c.max_pixels / frames),
                                           static_cast<int64_t>(static_cast<double>(c.min_pixels) * 1.05));
        max_pixels = per_frame * frames;
      }
      if (c.do_resize) {
        try {
          size = qwen3_vl::smart_resize(frames, x.size(3), x.size(4), tps, factor, c.min_pixels, max_pixels);
        } catch (const Error& e) {
          fail(what, ": ", e.what());
        }
      } else {
        size = target_size(x.size(3), x.size(4), max_pixels, c, what);
      }
    }
    const auto [h, w] = size;
    at::Tensor resized = resize_bicubic(x.reshape({-1, C, x.size(3), x.size(4)}), h, w);
    x = rescale_and_normalize(resized.reshape({1, frames, C, h, w}), rescale_normalize_steps(c));
    int64_t t = frames;
    if (const int64_t pad = (tps - t % tps) % tps) {  // repeat the last frame
      x = torch::cat({x, x.narrow(1, t - 1, 1).expand({-1, pad, -1, -1, -1})}, 1);
      t += pad;
    }
    const int64_t gt = t / tps, gh = h / P, gw = w / P;
    x = x.view({1, gt, tps, C, gh / m, m, P, gw / m, m, P})
            .permute({0, 1, 4, 7, 5, 8, 3, 2, 6, 9})
            .reshape({gt * gh * gw, C * tps * P * P});
    patches.push_back(x);
    grids.insert(grids.end(), {gt, gh, gw});
    // Qwen2_5_VLProcessor: temporal_patch_size / VideoMetadata.sampled_fps (24 when unknown).
    const VideoFrameTimes timing = times.empty() ? VideoFrameTimes{} : times[i];
    MM_CHECK(timing.sampled_fps > 0, what, ": sampled fps must be positive, got ", timing.sampled_fps);
    out.second_per_grid_ts.push_back(static_cast<double>(tps) / timing.sampled_fps);
    if (qwen3) {
      std::vector<int64_t> indices = timing.frame_indices;
      if (indices.empty())
        for (int64_t f = 0; f < frames; ++f) indices.push_back(f);
      MM_CHECK(static_cast<int64_t>(indices.size()) == frames, what, ": ", indices.size(), " frame indices for ",
               frames, " frames");
      out.timestamps.push_back(qwen3_vl::grid_timestamps(indices, timing.source_fps, tps));
    }
  }
  out.pixel_values = torch::cat(patches, 0);
  out.grid_thw = torch::tensor(grids, torch::kLong).reshape({static_cast<int64_t>(videos.size()), 3});
  return out;
}

namespace {

std::vector<int64_t> tokens_per_item(const at::Tensor& grid_thw, int64_t merge_size,
                                     const char* what) {
  if (!grid_thw.defined()) return {};
  MM_CHECK(grid_thw.dim() == 2 && grid_thw.size(1) == 3, what,
           "_grid_thw: expected [num_items, 3], got ", grid_thw.sizes());
  at::Tensor counts = grid_thw.to(torch::kLong).prod(1).div(merge_size * merge_size, "floor");
  return std::vector<int64_t>(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + counts.numel());
}

// The text with its i-th image placeholder replaced by image(i) and its i-th video placeholder by
// video(i); the counts must match the grids'.
template <typename ImageText, typename VideoText>
std::string replace_placeholders(const std::string& text, size_t images, size_t videos, const std::string& image_token,
                                 const std::string& video_token, ImageText image, VideoText video) {
  MM_CHECK(!image_token.empty() && !video_token.empty(), "placeholder tokens must not be empty");

  // Placeholders left to right; where both match at one place the image token wins, like the
  // reference's regex alternation (image|video).
  struct Match { size_t pos; bool image; };
  std::vector<Match> matches;
  size_t num_images = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t i = text.find(image_token, pos), v = text.find(video_token, pos);
    if (i == std::string::npos && v == std::string::npos) break;
    const bool image = i <= v;
    matches.push_back({image ? i : v, image});
    num_images += image;
    pos = (image ? i + image_token.size() : v + video_token.size());
  }
  const size_t num_videos = matches.size() - num_images;
  MM_CHECK(num_images == images, "the text has ", num_images, " image placeholders but ", images,
           " images were given (placeholder ", image_token, ")");
  MM_CHECK(num_videos == videos, "the text has ", num_videos, " video placeholders but ", videos,
           " videos were given (placeholder ", video_token, ")");

  std::string out;
  size_t last = 0, next_image = 0, next_video = 0;
  for (const auto& match : matches) {
    out.append(text, last, match.pos - last);
    out += match.image ? image(next_image++) : video(next_video++);
    last = match.pos + (match.image ? image_token : video_token).size();
  }
  out.append(text, last, std::string::npos);
  return out;
}

std::string repeated(const std::string& token, int64_t copies) {
  std::string out;
  out.reserve(token.size() * static_cast<size_t>(copies));
  for (int64_t k = 0; k < copies; ++k) out += token;
  return out;
}

}  // namespace

std::string expand_vision_placeholders(const std::string& text, const at::Tensor& image_grid_thw,
                                       const at::Tensor& video_grid_thw, int64_t merge_size,
                                       const std::string& image_token, const std::string& video_token) {
  MM_CHECK(merge_size > 0, "merge_size must be positive, got ", merge_size);
  const auto image_tokens = tokens_per_item(image_grid_thw, merge_size, "image");
  const auto video_tokens = tokens_per_item(video_grid_thw, merge_size, "video");
  return replace_placeholders(
      text, image_tokens.size(), video_tokens.size(), image_token, video_token,
      [&](size_t i) { return repeated(image_token, image_tokens[i]); },
      [&](size_t i) { return repeated(video_token, video_tokens[i]); });
}

std::string expand_vision_placeholders_with_timestamps(
    const std::string& text, const at::Tensor& image_grid_thw, const at::Tensor& video_grid_thw, int64_t merge_size,
    const std::vector<std::vector<double>>& video_timestamps, const std::string& image_token,
    const std::string& video_token, const std::string& vision_start, const std::string& vision_end) {
  MM_CHECK(merge_size > 0, "merge_size must be positive, got ", merge_size);
  const auto image_tokens = tokens_per_item(image_grid_thw, merge_size, "image");
  const auto video_tokens = tokens_per_item(video_grid_thw, merge_size, "video");
  MM_CHECK(video_timestamps.size() == video_tokens.size(), video_timestamps.size(), " videos have timestamps but ",
           video_tokens.size(), " videos were given");
  const at::Tensor grid = video_tokens.empty() ? at::Tensor() : video_grid_thw.to(torch::kLong).contiguous();
  return replace_placeholders(
      text, image_tokens.size(), video_tokens.size(), image_token, video_token,
      [&](size_t i) { return repeated(image_token, image_tokens[i]); },
      [&](size_t i) {
        const int64_t frames = grid[static_cast<int64_t>(i)][0].item<int64_t>();
        const auto& stamps = video_timestamps[i];
        MM_CHECK(static_cast<int64_t>(stamps.size()) == frames, "video ", i, " has ", stamps.size(),
                 " timestamps for ", frames, " temporal patches");
        const std::string frame = vision_start + repeated(video_token, video_tokens[i] / frames) + vision_end;
        std::string out;
        for (const double t : stamps) {
          char stamp[64];
          std::snprintf(stamp, sizeof stamp, "<%.1f seconds>", t);  // Python's f"{t:.1f}"
          out += stamp + frame;
        }
        return out;
      });
}

std::string Qwen2VLProcessor::expand_placeholders(const std::string& text, const at::Tensor& image_grid_thw,
                                                  const at::Tensor& video_grid_thw,
                                                  const std::vector<std::vector<double>>& video_timestamps,
                                                  const std::string& image_token,
                                                  const std::string& video_token) const {
  if (video_.video_kind == VideoProcessorKind::qwen3_vl)
    return expand_vision_placeholders_with_timestamps(text, image_grid_thw, video_grid_thw, image_.merge_size,
                                                      video_timestamps, image_token, video_token);
  return expand_vision_placeholders(text, image_grid_thw, video_grid_thw, image_.merge_size, image_token, video_token);
}

}  // namespace mm
