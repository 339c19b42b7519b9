// Which kernel at::scaled_dot_product_attention runs, for `mmtrain --version` and the logs: the
// models' dense attention goes through it (flash, memory-efficient or cuDNN on a GPU, the CPU's
// flash kernel or the math path), and libtorch picks by device, dtype and shape.
#pragma once
#include <c10/core/Device.h>

#include <string>

namespace mm {

// The backend libtorch's SDPA choice picks on `device` for a causal batch of 8 heads x 256
// tokens x head dim 128 (bf16 on a GPU, fp32 on the CPU): "flash_attention",
// "efficient_attention", "cudnn_attention", "math" or "overrideable".
std::string sdpa_backend(const c10::Device& device);

}  // namespace mm
