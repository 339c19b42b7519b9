// Rotary position embeddings for text decoders: classic 1D RoPE and Qwen2-VL's multimodal
// M-RoPE, whose frequency bands take their position from the temporal, height or width axis, in
// consecutive bands (Qwen2-VL, Qwen2.5-VL) or interleaved (Qwen3-VL, Qwen3.5).
// Angles are always computed in fp32 (as the reference does with autocast disabled); cos/sin
// are cast to the activation dtype only at the end.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace mm {

// cos and sin tables, [batch, seq, rotary_dim] each (rotary_dim = head_dim unless partial), in the
// activation dtype.
struct RotaryCosSin {
  torch::Tensor cos;
  torch::Tensor sin;
};

// 1 / theta^(2i / head_dim) for i in [0, head_dim / 2): [head_dim / 2] fp32.
torch::Tensor rope_inv_freq(int64_t head_dim, double theta, const c10::Device& device);

// 1D RoPE. position_ids: [batch, seq] integer. The halves of head_dim repeat the frequencies.
RotaryCosSin rope_cos_sin(const torch::Tensor& inv_freq, const torch::Tensor& position_ids,
                          c10::ScalarType dtype);

// M-RoPE. position_ids: [3, batch, seq] (temporal, height, width). mrope_section splits the
// head_dim / 2 frequencies into consecutive bands; band i uses axis i % 3.
RotaryCosSin mrope_cos_sin(const torch::Tensor& inv_freq, const torch::Tensor& position_ids,
                           const std::vector<int64_t>& mrope_section, c10::ScalarType dtype);

// Interleaved M-RoPE (HF: Qwen3VLTextRotaryEmbedding). position_ids: [3, batch, seq]. Frequency j
// takes the height position when j % 3 == 1 and j < 3 * mrope_section[1], the width position
// when j % 3 == 2 and j < 3 * mrope_section[2], else the temporal one.
RotaryCosSin interleaved_mrope_cos_sin(const torch::Tensor& inv_freq, const torch::Tensor& position_ids,
                                       const std::vector<int64_t>& mrope_section, c10::ScalarType dtype);

// x: [batch, heads, seq, head_dim]; rope: [batch, seq, rotary_dim]. x * cos + rotate_half(x) * sin
// on the leading rotary_dim channels (all of them but with partial rotary, e.g. Qwen3.5's quarter);
// the others pass through.
torch::Tensor apply_rotary(const torch::Tensor& x, const RotaryCosSin& rope);

}  // namespace mm
