// Attention confined to segments of a packed sequence (what flash-attn's varlen kernels do with
// cu_seqlens), on at::scaled_dot_product_attention. Segments of equal length are batched into one
// SDPA call: a run of adjacent equal-length segments is a view, scattered ones are gathered. The
// per-row math is that of one SDPA call per segment (the reference's non-flash path), without a
// Python-style loop over hundreds of windows.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <vector>

namespace mm {

class VarlenSegments {
 public:
  // cu_seqlens: [num_segments + 1] nondecreasing boundaries starting at 0; empty segments are
  // dropped. Index tensors are built once here, on `device`, and reused by every layer.
  VarlenSegments(const std::vector<int64_t>& cu_seqlens, c10::Device device);

  int64_t total_length() const { return total_; }
  size_t num_sdpa_calls() const { return groups_.size(); }

  // q, k, v: [seq, heads, head_dim] (any strides) -> [seq, heads, head_dim], non-causal softmax
  // attention within each segment, scaled by `scale`.
  at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       double scale) const;

 private:
  struct Group {
    int64_t length = 0;  // tokens per segment
    int64_t count = 0;   // segments in this group
    int64_t start = -1;  // first token when the segments are adjacent (a view), else -1
    at::Tensor rows;     // [count * length] token indices when gathered
  };
  std::vector<Group> groups_;
  at::Tensor inverse_;  // [seq] maps group-concatenated rows back; undefined when in order
  int64_t total_ = 0;
};

}  // namespace mm
