// Wan's 3D rotary position embedding (diffusers' WanRotaryPosEmbed): each head's channel pairs
// are split into a frame part (head_dim - 2 * h), a height part and a width part
// (h = 2 * (head_dim / 6) channels each); a token at patch grid position (f, y, x) rotates the
// pairs of each part by position * theta^(-2i / part_width).
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>

namespace mm {

struct WanRotaryTables {
  torch::Tensor cos, sin;  // [1, tokens, 1, head_dim / 2] fp32, tokens in (frame, height, width) order
};

// Tables for a grid of frames x height x width patches. Computed in float64 and rounded to fp32
// as diffusers does; positions beyond max_seq_len on any axis are refused (diffusers' table ends
// there).
WanRotaryTables wan_rotary_tables(int64_t head_dim, int64_t frames, int64_t height, int64_t width,
                                  int64_t max_seq_len, const c10::Device& device, double theta = 10000.0);

// Rotates channel pairs (2i, 2i+1) of x: [batch, tokens, heads, head_dim] -> the same shape and
// dtype (computed in fp32 when x is in a lower precision, as diffusers' fp32 tables promote it).
torch::Tensor wan_apply_rotary(const torch::Tensor& x, const WanRotaryTables& tables);

}  // namespace mm
