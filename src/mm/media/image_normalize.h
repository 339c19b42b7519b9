// transformers' TorchvisionBackend.rescale_and_normalize, shared by the image processors: with
// both steps the float32 mean and std are scaled by 1 / rescale_factor and one (x - mean) / std is
// done on the uint8 values as float32 (one rounding, as the reference).
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

namespace mm {

struct RescaleNormalize {
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255;
  bool do_normalize = true;
  std::vector<double> mean, std;  // per channel
};

// images: [..., C, H, W] (C the third-last dimension), uint8 or float -> float32. Without either
// step the values come back as float32 (the reference keeps uint8; the values are the same).
at::Tensor rescale_and_normalize(const at::Tensor& images, const RescaleNormalize& steps);

}  // namespace mm
