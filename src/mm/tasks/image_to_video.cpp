// Image-to-video specifics of diffusers' WanImageToVideoPipeline (declared in video_sampling.h):
// the image preprocessing, the CLIP image tokens and the latent condition (prepare_latents).
// The denoising loop is video_sampling.cpp's.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "mm/core/error.h"
#include "mm/models/wan/wan_pipeline.h"
#include "mm/tasks/video_sampling.h"

namespace mm {

namespace {

// Pillow's Resample.c: coefficients in 22-bit fixed point for 8-bit images.
constexpr int kPrecisionBits = 32 - 8 - 2;

double sinc(double x) {
  if (x == 0.0) return 1.0;
  x *= M_PI;
  return std::sin(x) / x;
}

double lanczos(double x) { return (-3.0 <= x && x < 3.0) ? sinc(x) * sinc(x / 3) : 0.0; }

// Pillow's precompute_coeffs + normalize_coeffs_8bpc for one axis: per output pixel the first input
// pixel, the tap count and ksize fixed-point weights.
struct Coefficients {
  int64_t ksize = 0;
  std::vector<int64_t> first, count;
  std::vector<int32_t> weights;  // [out, ksize]
};

Coefficients precompute(int64_t in_size, int64_t out_size) {
  constexpr double kSupport = 3.0;  // Lanczos-3
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double filter_scale = std::max(scale, 1.0);
  const double support = kSupport * filter_scale;
  Coefficients c;
  c.ksize = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  c.first.resize(out_size);
  c.count.resize(out_size);
  c.weights.assign(out_size * c.ksize, 0);
  std::vector<double> k(c.ksize);
  for (int64_t xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filter_scale;
    const int64_t xmin = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    const int64_t xmax = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in_size) - xmin;
    double ww = 0.0;
    for (int64_t x = 0; x < xmax; ++x) {
      k[x] = lanczos((x + xmin - center + 0.5) * ss);
      ww += k[x];
    }
    for (int64_t x = 0; x < xmax; ++x) {
      const double w = ww != 0.0 ? k[x] / ww : k[x];
      // Rounded half away from zero, as Pillow does.
      c.weights[xx * c.ksize + x] = static_cast<int32_t>(w < 0 ? -0.5 + w * (1 << kPrecisionBits)
                                                              : 0.5 + w * (1 << kPrecisionBits));
    }
    c.first[xx] = xmin;
    c.count[xx] = xmax;
  }
  return c;
}

uint8_t clip8(int32_t v) {
  const int32_t shifted = v >> kPrecisionBits;  // arithmetic shift, as Pillow's table lookup
  return static_cast<uint8_t>(std::clamp<int32_t>(shifted, 0, 255));
}

// One pass along `axis` (1: columns of each row, 0: rows) of an [H, W, 3] uint8 image.
at::Tensor resample_axis(const at::Tensor& in, int64_t axis, int64_t out_size) {
  const int64_t h = in.size(0), w = in.size(1);
  const auto c = precompute(in.size(axis), out_size);
  const int64_t out_h = axis == 0 ? out_size : h, out_w = axis == 1 ? out_size : w;
  auto out = at::empty({out_h, out_w, 3}, at::kByte);
  const uint8_t* src = in.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  for (int64_t y = 0; y < out_h; ++y) {
    for (int64_t x = 0; x < out_w; ++x) {
      const int64_t o = axis == 1 ? x : y;
      const int32_t* k = &c.weights[o * c.ksize];
      int32_t ss[3] = {1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1)};
      for (int64_t i = 0; i < c.count[o]; ++i) {
        const int64_t sy = axis == 0 ? c.first[o] + i : y, sx = axis == 1 ? c.first[o] + i : x;
        const uint8_t* p = src + (sy * w + sx) * 3;
        for (int ch = 0; ch < 3; ++ch) ss[ch] += static_cast<int32_t>(p[ch]) * k[i];
      }
      for (int ch = 0; ch < 3; ++ch) dst[(y * out_w + x) * 3 + ch] = clip8(ss[ch]);
    }
  }
  return out;
}

void check_rgb(const at::Tensor& image, const char* what) {
  MM_CHECK(image.defined() && image.dim() == 3 && image.size(2) == 3 && image.scalar_type() == at::kByte,
           what, ": expected uint8 [height, width, 3] RGB pixels, got ",
           image.defined() ? image.sizes() : at::IntArrayRef{}, image.defined() ? " " : "nothing",
           image.defined() ? c10::toString(image.scalar_type()) : "");
  MM_CHECK(image.size(0) > 0 && image.size(1) > 0, what, ": the image is empty");
}

}  // namespace

at::Tensor resize_lanczos_like_pil(const at::Tensor& image, int64_t height, int64_t width) {
  check_rgb(image, "resize");
  MM_CHECK(height > 0 && width > 0, "resize: the size must be positive, got ", width, "x", height);
  auto x = image.contiguous();
  const int64_t h = x.size(0), w = x.size(1);
  // Pillow skips a pass whose size does not change (and returns a copy when neither does). Each
  // pass rounds and clips to uint8, so the order matters: Pillow 13 (the version the oracle runs)
  // takes the vertical pass first when it shrinks the height and 2 (width' - width) > height' -
  // height, horizontal first otherwise — a rule measured against it on random sizes (every result
  // equal to either order's in exactly one of them), not read from its source.
  const bool vertical_first = height < h && 2 * (width - w) > height - h;
  if (vertical_first) {
    x = resample_axis(x, 0, height);
    if (w != width) x = resample_axis(x, 1, width);
  } else {
    if (w != width) x = resample_axis(x, 1, width);
    if (h != height) x = resample_axis(x, 0, height);
  }
  return x.is_same(image) ? x.clone() : x;
}

at::Tensor preprocess_video_image(const at::Tensor& image, int64_t height, int64_t width) {
  const auto resized = resize_lanczos_like_pil(image, height, width);
  // pil_to_numpy (x / 255 in float32), then normalize (2x - 1), as VaeImageProcessor does.
  const auto unit = resized.to(at::kFloat) / 255.0f;
  return (unit * 2.0f - 1.0f).permute({2, 0, 1}).unsqueeze(0).contiguous();
}

WanImageConditioning prepare_image_conditioning(WanModel& model, const at::Tensor& image, const at::Tensor& last_image,
                                                int64_t batch, const VideoSamplingOptions& o) {
  MM_CHECK(model.config.image_to_video(), model.dir.string(), " is a ", model.config.class_name,
           " (text to video): image-to-video needs a WanImageToVideoPipeline");
  MM_CHECK(model.vae, "image-to-video needs the VAE (", model.dir.string(), "/vae)");
  MM_CHECK(model.transformer, "image-to-video needs the transformer (", model.dir.string(), "/transformer)");
  MM_CHECK(batch >= 1, "image-to-video: the batch must be at least 1");
  o.validate();
  check_rgb(image, "--image");
  const bool expand = model.config.expand_timesteps;
  if (last_image.defined()) {
    check_rgb(last_image, "--last-image");
    MM_CHECK(!expand, "--last-image: ", model.dir.string(),
             " is a Wan2.2 TI2V pipeline (expand_timesteps), which conditions on the first frame only");
  }
  torch::NoGradGuard no_grad;
  WanImageConditioning out;
  const auto& tc = model.transformer->config();
  if (tc.image_dim) {
    // CLIP tokens of the images as given; the CLIP processor does its own resize and crop.
    std::vector<at::Tensor> images{image};
    if (last_image.defined()) images.push_back(last_image);
    out.image_embeds = model.encode_image(images).to(at::kFloat);
  }
  out.image = preprocess_video_image(image, o.height, o.width);
  if (last_image.defined()) out.last_image = preprocess_video_image(last_image, o.height, o.width);

  const int64_t frames = wan_pixel_frames(model, o);
  MM_CHECK(!last_image.defined() || frames >= 2, "--last-image: needs at least 2 frames, got --frames ", o.frames);
  if (!expand) {
    // One condition, repeated per video (each video is conditioned on the same frames).
    out.condition = wan_frame_condition(model, out.image, out.last_image, frames).repeat({batch, 1, 1, 1, 1});
    return out;
  }
  out.condition = model.vae->encode_normalized(out.image.unsqueeze(2)).to(at::kFloat).repeat({batch, 1, 1, 1, 1});
  return out;
}

at::Tensor wan_frame_condition(WanModel& model, const at::Tensor& first, const at::Tensor& last, int64_t frames) {
  MM_CHECK(model.vae, "the image condition needs the VAE (", model.dir.string(), "/vae)");
  MM_CHECK(first.dim() == 4 && first.size(1) == 3, "the image condition: first frames must be [B, 3, H, W], got ",
           first.sizes());
  MM_CHECK(!last.defined() || last.sizes() == first.sizes(), "the image condition: last frames must be ",
           first.sizes(), " as the first, got ", last.sizes());
  const auto& vc = model.vae->config();
  const int64_t t = vc.temporal_compression(), s = vc.spatial_compression();
  MM_CHECK(frames >= (last.defined() ? 2 : 1) && (frames - 1) % t == 0, "the image condition: ", frames,
           " pixel frames is not 1 + k * ", t, (last.defined() ? " with k >= 1" : ""));
  const int64_t batch = first.size(0), height = first.size(2), width = first.size(3);
  const int64_t latent_frames = (frames - 1) / t + 1, lh = height / s, lw = width / s;
  torch::NoGradGuard no_grad;
  // [B, 3, F, H, W]: the first frame, zero frames (mid-grey in [-1, 1]) for the frames to
  // generate, then the last frame.
  const auto options = first.options().dtype(at::kFloat);
  std::vector<at::Tensor> parts{first.to(at::kFloat).unsqueeze(2)};
  const int64_t zeros = frames - 1 - (last.defined() ? 1 : 0);
  if (zeros > 0) parts.push_back(at::zeros({batch, 3, zeros, height, width}, options));
  if (last.defined()) parts.push_back(last.to(at::kFloat).unsqueeze(2));
  const auto latent = model.vae->encode_normalized(at::cat(parts, 2)).to(at::kFloat);
  // The frame mask: 1 on the given pixel frames, the first repeated t times so that the F + t - 1
  // entries fold into t channels of T' latent frames.
  auto mask = at::zeros({batch, 1, frames, lh, lw}, latent.options());
  mask.select(2, 0).fill_(1);
  if (last.defined()) mask.select(2, frames - 1).fill_(1);
  const auto head = mask.narrow(2, 0, 1).repeat_interleave(t, 2);
  mask = at::cat({head, mask.narrow(2, 1, frames - 1)}, 2).view({batch, latent_frames, t, lh, lw}).transpose(1, 2);
  return at::cat({mask, latent}, 1).contiguous();
}

at::Tensor frames_as_rgb8(const at::Tensor& frames) {
  MM_CHECK(frames.dim() == 4 && frames.size(1) == 3, "frames_as_rgb8: expected [B, 3, H, W], got ", frames.sizes());
  return ((frames.to(at::kFloat) + 1.0f) * 127.5f).round().clamp(0, 255).to(at::kByte).permute({0, 2, 3, 1})
      .contiguous();
}

SampledVideo sample_image_to_video(WanModel& model, const std::vector<std::string>& prompts, const at::Tensor& image,
                                   const VideoSamplingOptions& o, const at::Tensor& last_image,
                                   const at::Tensor& initial_latents, const SamplingProgress& progress) {
  MM_CHECK(!prompts.empty(), "sampling needs at least one prompt");
  o.validate();
  MM_CHECK(model.config.image_to_video(), model.dir.string(), " is a ", model.config.class_name,
           " (text to video): image-to-video needs a WanImageToVideoPipeline");
  const auto text = model.encode_prompts(prompts, o.max_sequence_length);
  at::Tensor negative;
  if (o.guidance > 1.0)
    negative = model.encode_prompts(std::vector<std::string>(prompts.size(), o.negative_prompt), o.max_sequence_length);
  const auto conditioning = prepare_image_conditioning(model, image, last_image, static_cast<int64_t>(prompts.size()), o);
  return sample_image_to_video_from_embeddings(model, text, negative, conditioning, o, initial_latents, progress);
}

}  // namespace mm
