// CLIP image preprocessing, equal to transformers 5.17's CLIPImageProcessor — the class diffusers'
// WanImageToVideoPipeline loads for Wan2.1-I2V, which in 5.17 is the torchvision backend
// (CLIPImageProcessorPil is the PIL one). Per image: resize (shortest edge to size, the long edge
// truncated, or to a fixed height x width) with antialiased bicubic on uint8, zero-pad and center
// crop to crop_size, then rescale and normalize in float32 — the same ATen ops in the same order
// and dtypes as the reference on CPU, so the pixel values agree to float rounding. (PIL's own
// bicubic rounds differently: it differs from the reference by up to 2 uint8 levels.)
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace mm {

// preprocessor_config.json. Defaults are CLIPImageProcessor's class defaults (also Wan2.1-I2V's
// file): shortest edge 224, center crop 224 x 224, OpenAI CLIP mean / std.
struct CLIPImageProcessorConfig {
  bool do_resize = true;
  // size: {"shortest_edge": n} (a bare number means the same) or {"height": h, "width": w}.
  bool fixed_size = false;       // size is {"height", "width"}
  int64_t shortest_edge = 224;   // used unless fixed_size
  int64_t resize_height = 0, resize_width = 0;  // used if fixed_size
  bool do_center_crop = true;
  int64_t crop_height = 224, crop_width = 224;  // crop_size: {"height", "width"} or a bare number
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255;
  bool do_normalize = true;
  std::vector<double> image_mean = {0.48145466, 0.4578275, 0.40821073};  // 1 or 3 values
  std::vector<double> image_std = {0.26862954, 0.26130258, 0.27577711};
  // Inputs are RGB already (our decoders convert), so this is read for completeness only.
  bool do_convert_rgb = true;

  // A preprocessor_config.json object over the defaults; only resample 3 (bicubic) is accepted.
  // Errors name the file and key.
  static CLIPImageProcessorConfig parse(const nlohmann::json& json, const std::string& file);
  void validate(const std::string& file) const;
};

class CLIPImageProcessor {
 public:
  explicit CLIPImageProcessor(CLIPImageProcessorConfig config = {});
  // <dir>/preprocessor_config.json (e.g. the image_processor folder of a diffusers Wan I2V repo).
  static CLIPImageProcessor from_pretrained(const std::filesystem::path& dir);

  const CLIPImageProcessorConfig& config() const { return config_; }

  // (height, width) after the resize step for an image of height x width (its own size without
  // do_resize).
  std::pair<int64_t, int64_t> resized_size(int64_t height, int64_t width) const;

  // images: each uint8 [H, W, 3] RGB -> pixel_values float32 [N, 3, out_h, out_w], where out is
  // crop_size with do_center_crop, else the resized size (then all images must end up equally
  // sized, as the reference cannot stack them otherwise). Throws mm::Error naming the image.
  at::Tensor preprocess(const std::vector<at::Tensor>& images) const;

 private:
  CLIPImageProcessorConfig config_;
};

}  // namespace mm
