// Qwen2-VL preprocessing: the same ATen ops, in the same order and dtypes, as transformers 5.17's
// Qwen2VLImageProcessor / Qwen2VLVideoProcessor on CPU (torchvision backend), so results agree
// with the reference bit for bit or to float rounding.
#include "mm/models/qwen2_vl/qwen2_vl_processor.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

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
                                                const std::vector<double>& sampled_fps) const {
  MM_CHECK(!videos.empty(), "preprocess_videos: no videos given");
  MM_CHECK(sampled_fps.empty() || sampled_fps.size() == videos.size(), "preprocess_videos: ",
           sampled_fps.size(), " frame rates given for ", videos.size(), " videos");
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
    if (c.cap_pixels_per_frame) {  // an even share of the whole video's pixel budget
      const int64_t factor = P * m;
      const auto total_pixels = static_cast<int64_t>(
          static_cast<double>(c.max_video_tokens * factor * factor) * 0.9);
      max_pixels = std::max(std::min(max_pixels, total_pixels * tps / frames),
                            static_cast<int64_t>(static_cast<double>(c.min_pixels) * 1.05));
    }
    const auto [h, w] = target_size(x.size(3), x.size(4), max_pixels, c, what);
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
    const double fps = sampled_fps.empty() ? 24.0 : sampled_fps[i];
    MM_CHECK(fps > 0, what, ": sampled fps must be positive, got ", fps);
    out.second_per_grid_ts.push_back(static_cast<double>(tps) / fps);
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

}  // namespace

std::string expand_vision_placeholders(const std::string& text, const at::Tensor& image_grid_thw,
                                       const at::Tensor& video_grid_thw, int64_t merge_size,
                                       const std::string& image_token,
                                       const std::string& video_token) {
  MM_CHECK(!image_token.empty() && !video_token.empty(), "placeholder tokens must not be empty");
  MM_CHECK(merge_size > 0, "merge_size must be positive, got ", merge_size);
  const auto image_tokens = tokens_per_item(image_grid_thw, merge_size, "image");
  const auto video_tokens = tokens_per_item(video_grid_thw, merge_size, "video");

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
  MM_CHECK(num_images == image_tokens.size(), "the text has ", num_images,
           " image placeholders but ", image_tokens.size(), " images were given (placeholder ",
           image_token, ")");
  MM_CHECK(num_videos == video_tokens.size(), "the text has ", num_videos,
           " video placeholders but ", video_tokens.size(), " videos were given (placeholder ",
           video_token, ")");

  std::string out;
  size_t last = 0, next_image = 0, next_video = 0;
  for (const auto& match : matches) {
    out.append(text, last, match.pos - last);
    const std::string& token = match.image ? image_token : video_token;
    const int64_t copies = match.image ? image_tokens[next_image++] : video_tokens[next_video++];
    out.reserve(out.size() + token.size() * copies);
    for (int64_t k = 0; k < copies; ++k) out += token;
    last = match.pos + token.size();
  }
  out.append(text, last, std::string::npos);
  return out;
}

}  // namespace mm
