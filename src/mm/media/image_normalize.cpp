#include "mm/media/image_normalize.h"

#include <torch/torch.h>

namespace mm {

at::Tensor rescale_and_normalize(const at::Tensor& images, const RescaleNormalize& steps) {
  if (steps.do_normalize) {
    at::Tensor mean = torch::tensor(steps.mean, torch::kDouble).to(torch::kFloat);
    at::Tensor std = torch::tensor(steps.std, torch::kDouble).to(torch::kFloat);
    if (steps.do_rescale) {
      mean = mean * (1.0 / steps.rescale_factor);
      std = std * (1.0 / steps.rescale_factor);
    }
    return images.to(torch::kFloat).sub(mean.view({-1, 1, 1})).div_(std.view({-1, 1, 1}));
  }
  if (steps.do_rescale) return images * steps.rescale_factor;
  return images.to(torch::kFloat);
}

}  // namespace mm
