#include "mm/nn/attention_backend.h"

#include <ATen/SDPBackend.h>
#include <ATen/ops/_fused_sdp_choice.h>
#include <ATen/ops/zeros.h>

namespace mm {

std::string sdpa_backend(const c10::Device& device) {
  const auto dtype = device.is_cpu() ? at::kFloat : at::kBFloat16;
  const auto q = at::zeros({1, 8, 256, 128}, at::TensorOptions().device(device).dtype(dtype));
  switch (static_cast<at::SDPBackend>(at::_fused_sdp_choice(q, q, q, {}, 0.0, /*is_causal=*/true))) {
    case at::SDPBackend::flash_attention: return "flash_attention";
    case at::SDPBackend::efficient_attention: return "efficient_attention";
    case at::SDPBackend::cudnn_attention: return "cudnn_attention";
    case at::SDPBackend::math: return "math";
    case at::SDPBackend::overrideable: return "overrideable";
    default: return "none";
  }
}

}  // namespace mm
