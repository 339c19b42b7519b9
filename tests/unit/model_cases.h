// Shared by the Qwen-VL model and generation tests: an oracle's goldens and its cases
// (qwen2_5_vl_model by default, qwen2_vl_model for Qwen2-VL).
#pragma once
#include <string>
#include <vector>

#include "mm/core/safetensors.h"
#include "mm/models/qwen_vl/qwen_vl_model.h"
#include "testing.h"

namespace mm::testing {

inline const std::vector<std::string> kCases = {"text", "image", "two_images", "video", "image_video", "batch"};

inline std::filesystem::path model_dir(const std::string& name, const std::string& oracle = "qwen2_5_vl_model") {
  return golden_dir(oracle) / name;
}

inline std::shared_ptr<SafetensorsFile> cases_of(const std::string& config,
                                                 const std::string& oracle = "qwen2_5_vl_model") {
  return SafetensorsFile::open(golden_dir(oracle) / ("cases_" + config + ".safetensors"));
}

inline torch::Tensor field(const SafetensorsFile& file, const std::string& c, const std::string& name) {
  const auto key = c + "." + name;
  return file.contains(key) ? file.tensor(key).clone() : torch::Tensor();
}

inline QwenVLInputs inputs_of(const SafetensorsFile& file, const std::string& c) {
  QwenVLInputs in;
  in.input_ids = field(file, c, "input_ids");
  in.attention_mask = field(file, c, "attention_mask");
  in.pixel_values = field(file, c, "pixel_values");
  in.image_grid_thw = field(file, c, "image_grid_thw");
  in.pixel_values_videos = field(file, c, "pixel_values_videos");
  in.video_grid_thw = field(file, c, "video_grid_thw");
  if (auto s = field(file, c, "second_per_grid_ts"); s.defined())
    in.second_per_grid_ts = std::vector<double>(s.data_ptr<double>(), s.data_ptr<double>() + s.numel());
  return in;
}

}  // namespace mm::testing
