// Attention confined to segments of a packed sequence, as flash-attn's varlen kernels compute it
// from cumulative sequence lengths (cu_seqlens): the vision towers' windows and frames, and the
// decoder's packed samples (causal within each). Memory is linear in the sequence, never a
// [seq, seq] mask. Two kernels with one meaning:
//  - flash: on a CUDA GPU with bf16 or fp16 inputs, libtorch's flash-attention varlen kernel
//    (at::_flash_attention_forward with cu_seqlens; its backward is libtorch's), one call for the
//    whole packed sequence;
//  - sdpa, everywhere else (the CPU, fp32) and the CPU twin the tests prove: segments of equal
//    length are batched into one at::scaled_dot_product_attention call (a run of adjacent
//    equal-length segments is a view, scattered ones are gathered), so the per-row math is that
//    of one SDPA call per segment (the references' non-flash path), without a loop over
//    hundreds of windows.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <string>
#include <vector>

namespace mm {

enum class VarlenKernel { automatic, flash, sdpa };

class VarlenSegments {
 public:
  // cu_seqlens: [num_segments + 1] nondecreasing boundaries starting at 0; empty segments are
  // dropped. Index tensors are built once here, on `device`, and reused by every layer.
  VarlenSegments(const std::vector<int64_t>& cu_seqlens, c10::Device device);

  int64_t total_length() const { return total_; }
  size_t num_sdpa_calls() const { return groups_.size(); }

  // q: [seq, heads, head_dim]; k, v: [seq, kv_heads, head_dim] (any strides) with kv_heads
  // dividing heads (grouped-query attention). Returns [seq, heads, head_dim]: softmax attention
  // within each segment, causal (each position sees its segment's earlier positions) or not,
  // scaled by `scale`. `automatic` takes flash where flash_applies(q), else sdpa.
  at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale,
                       bool causal = false, VarlenKernel kernel = VarlenKernel::automatic) const;

  // Whether the flash kernel takes these queries: CUDA, bf16 or fp16, a head dimension that is
  // a multiple of 8 up to 256 (what libtorch's flash kernel accepts), and not turned off by
  // MM_VARLEN_KERNEL=sdpa.
  static bool flash_applies(const at::Tensor& q);

 private:
  at::Tensor sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale, bool causal) const;
  at::Tensor flash(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale, bool causal) const;

  struct Group {
    int64_t length = 0;  // tokens per segment
    int64_t count = 0;   // segments in this group
    int64_t start = -1;  // first token when the segments are adjacent (a view), else -1
    at::Tensor rows;     // [count * length] token indices when gathered
  };
  std::vector<Group> groups_;
  at::Tensor inverse_;  // [seq] maps group-concatenated rows back; undefined when in order
  int64_t total_ = 0;
  std::vector<int64_t> cu_seqlens_;
  int64_t max_length_ = 0;
  c10::Device device_;
  mutable at::Tensor cu_seqlens_int32_;  // the flash kernel's boundaries on device_, made on first use
};

// What packed and windowed attention runs on `device` for bf16 inputs (`mmtrain --version`):
// "flash_varlen" on a CUDA GPU (unless MM_VARLEN_KERNEL=sdpa), else "sdpa_per_length".
std::string varlen_backend(const c10::Device& device);

}  // namespace mm
