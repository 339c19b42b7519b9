// CLIPImageProcessor (transformers 5.17, torchvision backend) on CPU: TorchvisionBackend.resize /
// center_crop / rescale_and_normalize with the same ATen ops, order and dtypes.
#include "mm/models/clip/clip_image_processor.h"

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <algorithm>

#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/media/image_normalize.h"

namespace mm {
namespace {

// image_mean / image_std: a list of numbers or one number (broadcast over channels).
std::vector<double> read_channel_values(const JsonView& v, const std::string& key, std::vector<double> fallback) {
  if (!v.has(key)) return fallback;
  if (v.raw()[key].is_number()) return {v.get<double>(key)};
  auto values = v.get<std::vector<double>>(key);
  MM_CHECK(values.size() == 1 || values.size() == 3, v.where(key),
           ": expected 1 or 3 values (one per RGB channel), got ", values.size());
  return values;
}

// torchvision.transforms.v2.functional.resize_image, BICUBIC with antialias on a CPU uint8 image
// [1, C, H, W]: ATen's native uint8 kernel, no float round trip.
at::Tensor resize_bicubic(at::Tensor image, int64_t height, int64_t width) {
  if (image.size(2) == height && image.size(3) == width) return image;
  // torchvision restrides a single channels-last image so that ATen keeps channels-last for the
  // output; the kernel path (and so the rounding) may depend on it, so do the same.
  if (image.is_contiguous(at::MemoryFormat::ChannelsLast) && image.size(0) == 1 && image.numel() != image.stride(0)) {
    auto strides = image.strides().vec();
    strides[0] = image.numel();
    image = image.as_strided(image.sizes(), strides);
  }
  return at::_upsample_bicubic2d_aa(image, {height, width}, /*align_corners=*/false, std::nullopt, std::nullopt);
}

// TorchvisionBackend.center_crop: zero padding (left/top get the smaller half) where the crop is
// larger than the image, then the crop at int((size - crop) / 2).
at::Tensor center_crop(const at::Tensor& image, int64_t crop_h, int64_t crop_w) {
  const int64_t h = image.size(2), w = image.size(3);
  at::Tensor x = image;
  if (crop_w > w || crop_h > h) {
    const int64_t pad_w = std::max<int64_t>(crop_w - w, 0), pad_h = std::max<int64_t>(crop_h - h, 0);
    x = at::constant_pad_nd(x, {pad_w / 2, (pad_w + 1) / 2, pad_h / 2, (pad_h + 1) / 2}, 0);
  }
  const int64_t top = (x.size(2) - crop_h) / 2, left = (x.size(3) - crop_w) / 2;
  return x.narrow(2, top, crop_h).narrow(3, left, crop_w);
}

RescaleNormalize rescale_normalize_steps(const CLIPImageProcessorConfig& c) {
  return {c.do_rescale, c.rescale_factor, c.do_normalize, c.image_mean, c.image_std};
}

}  // namespace

CLIPImageProcessorConfig CLIPImageProcessorConfig::parse(const nlohmann::json& json, const std::string& file) {
  MM_CHECK(json.is_object(), file, ": expected a JSON object");
  const JsonView v(json, file);
  CLIPImageProcessorConfig c;
  c.do_resize = v.get_or<bool>("do_resize", c.do_resize);
  if (v.has("size")) {
    if (json["size"].is_number()) {
      c.shortest_edge = v.get<int64_t>("size");
    } else {
      const JsonView size = v.child("size");
      MM_CHECK(!size.has("longest_edge") && !size.has("max_height"), v.where("size"),
               ": only {shortest_edge} or {height, width} are supported, got ", json["size"].dump());
      if (size.has("shortest_edge")) {
        c.shortest_edge = size.get<int64_t>("shortest_edge");
      } else {
        MM_CHECK(size.has("height") && size.has("width"), v.where("size"),
                 ": needs shortest_edge or height and width, got ", json["size"].dump());
        c.fixed_size = true;
        c.resize_height = size.get<int64_t>("height");
        c.resize_width = size.get<int64_t>("width");
      }
    }
  }
  const int64_t resample = v.get_or<int64_t>("resample", 3);
  MM_CHECK(resample == 3, v.where("resample"), ": only 3 (bicubic) is supported, got ", resample);
  c.do_center_crop = v.get_or<bool>("do_center_crop", c.do_center_crop);
  if (v.has("crop_size")) {
    if (json["crop_size"].is_number()) {
      c.crop_height = c.crop_width = v.get<int64_t>("crop_size");
    } else {
      const JsonView crop = v.child("crop_size");
      c.crop_height = crop.get<int64_t>("height");
      c.crop_width = crop.get<int64_t>("width");
    }
  }
  c.do_rescale = v.get_or<bool>("do_rescale", c.do_rescale);
  c.rescale_factor = v.get_or<double>("rescale_factor", c.rescale_factor);
  c.do_normalize = v.get_or<bool>("do_normalize", c.do_normalize);
  c.image_mean = read_channel_values(v, "image_mean", c.image_mean);
  c.image_std = read_channel_values(v, "image_std", c.image_std);
  c.do_convert_rgb = v.get_or<bool>("do_convert_rgb", c.do_convert_rgb);
  c.validate(file);
  return c;
}

void CLIPImageProcessorConfig::validate(const std::string& file) const {
  auto positive = [&](const char* key, int64_t value) {
    MM_CHECK(value > 0, file, ": ", key, ": must be positive, got ", value);
  };
  if (fixed_size) {
    positive("size.height", resize_height);
    positive("size.width", resize_width);
  } else {
    positive("size.shortest_edge", shortest_edge);
  }
  positive("crop_size.height", crop_height);
  positive("crop_size.width", crop_width);
  MM_CHECK(!do_rescale || rescale_factor != 0, file, ": rescale_factor: must be non-zero");
  MM_CHECK(image_mean.size() == 1 || image_mean.size() == 3, file, ": image_mean: expected 1 or 3 values");
  MM_CHECK(image_std.size() == 1 || image_std.size() == 3, file, ": image_std: expected 1 or 3 values");
  for (double s : image_std) MM_CHECK(s != 0, file, ": image_std: must be non-zero");
}

CLIPImageProcessor::CLIPImageProcessor(CLIPImageProcessorConfig config) : config_(std::move(config)) {
  config_.validate("CLIP image processor config");
}

CLIPImageProcessor CLIPImageProcessor::from_pretrained(const std::filesystem::path& dir) {
  const auto file = dir / "preprocessor_config.json";
  return CLIPImageProcessor(CLIPImageProcessorConfig::parse(read_json_file(file), file.string()));
}

std::pair<int64_t, int64_t> CLIPImageProcessor::resized_size(int64_t height, int64_t width) const {
  const auto& c = config_;
  if (!c.do_resize) return {height, width};
  if (c.fixed_size) return {c.resize_height, c.resize_width};
  // transformers' get_resize_output_image_size(default_to_square=False): the short side becomes
  // shortest_edge, the long one int(shortest_edge * long / short) in double precision.
  const bool portrait = width <= height;
  const int64_t short_side = portrait ? width : height, long_side = portrait ? height : width;
  const auto new_long = static_cast<int64_t>(static_cast<double>(c.shortest_edge * long_side) /
                                             static_cast<double>(short_side));
  return portrait ? std::pair{new_long, c.shortest_edge} : std::pair{c.shortest_edge, new_long};
}

at::Tensor CLIPImageProcessor::preprocess(const std::vector<at::Tensor>& images) const {
  MM_CHECK(!images.empty(), "CLIP image processor: no images given");
  std::vector<at::Tensor> out;
  out.reserve(images.size());
  for (size_t i = 0; i < images.size(); ++i) {
    const auto& t = images[i];
    MM_CHECK(t.defined() && t.dim() == 3 && t.size(2) == 3 && t.scalar_type() == at::kByte, "CLIP image processor: image ",
             i, ": expected uint8 [H, W, 3] RGB, got ", t.defined() ? c10::toString(t.scalar_type()) : "undefined", " ",
             t.defined() ? t.sizes() : at::IntArrayRef{});
    MM_CHECK(t.size(0) > 0 && t.size(1) > 0, "CLIP image processor: image ", i, ": empty image ", t.sizes());
    // [H, W, C] -> [1, C, H, W] as a view, as PIL -> pil_to_tensor -> unsqueeze(0) gives.
    at::Tensor x = t.permute({2, 0, 1}).unsqueeze(0);
    const auto [h, w] = resized_size(x.size(2), x.size(3));
    x = resize_bicubic(x, h, w);
    if (config_.do_center_crop) x = center_crop(x, config_.crop_height, config_.crop_width);
    x = rescale_and_normalize(x, rescale_normalize_steps(config_));
    MM_CHECK(out.empty() || x.sizes() == out.front().sizes(), "CLIP image processor: image ", i, " becomes ",
             x.sizes(), " but image 0 became ", out.front().sizes(), " (without do_center_crop all images must resize to one size)");
    out.push_back(x);
  }
  return torch::cat(out, 0);
}

}  // namespace mm
