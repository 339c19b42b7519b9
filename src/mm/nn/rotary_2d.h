// Axial 2D rotary position embedding of vision transformers (Qwen2-VL / Qwen2.5-VL style): one
// set of frequencies over head_dim / 4, applied to the row index in the first quarter and the
// column index in the second, the halves repeated for rotate-half rotation over the whole head.
#pragma once
#include <ATen/core/Tensor.h>

#include <utility>

namespace mm {

// [head_dim / 4] fp32: 1 / theta^(2i / (head_dim / 2)).
at::Tensor axial_rope_inv_freq(int64_t head_dim, double theta);

// positions: [seq, 2] (row, column) integer; inv_freq: [head_dim / 4] fp32.
// returns cos, sin: [seq, head_dim] fp32, laid out [row freqs, column freqs, row, column].
std::pair<at::Tensor, at::Tensor> axial_rope_cos_sin(const at::Tensor& positions, const at::Tensor& inv_freq);

// x: [seq, ..., head_dim]; cos, sin: [seq, head_dim] fp32. Rotate-half rotation computed in fp32
// and cast back to x's dtype (as the reference does in every dtype).
at::Tensor apply_rotary_fp32(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace mm
