// Attention over one block of keys at a time, with the log-sum-exp of each query row, so that the
// blocks' partial results merge into attention over all keys (ring attention: each rank sees the
// key/value blocks one after another). A block every query sees whole goes through a fused
// flash-attention kernel that returns the LSE and takes the final out and LSE in its backward:
// torch's CPU kernel (fp32; fp64 stays fp64), or on a GPU the CUDA flash kernel for bf16/fp16
// (checked against fp32 by `./mm gpu-check`, blockwise.flash_lse_parts_bf16); masked blocks and
// other dtypes through the dense scores in fp32.
//
// Shapes as scaled_dot_product_attention: q [batch, heads, q_len, dim], k and v [batch, kv_heads,
// k_len, dim] with heads a multiple of kv_heads (grouped-query attention: query head i reads kv
// head i / (heads / kv_heads)). `allowed` [q_len, k_len] bool says which key each query may see
// (undefined: all); a row that sees no key of the block gets out 0 and lse -inf.
#pragma once
#include <ATen/core/Tensor.h>

namespace mm {

struct AttentionPart {
  at::Tensor out;  // [batch, heads, q_len, dim], in the compute dtype (fp32 or fp64)
  at::Tensor lse;  // [batch, heads, q_len], log of the softmax denominator over the block's keys
};

// softmax(q k^T * scale, masked by allowed) v over this block's keys, and each row's log-sum-exp.
AttentionPart attention_with_lse(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& allowed, double scale);

// The attention over the union of two blocks' keys from each block's part: the outputs weighted by
// exp(lse_i - lse), lse = log(exp(lse_a) + exp(lse_b)). Rows that saw no key in either stay 0, -inf.
AttentionPart merge_attention_parts(const AttentionPart& a, const AttentionPart& b);

struct AttentionGradients {
  at::Tensor dq, dk, dv;  // dk, dv with kv_heads heads (summed over the query heads sharing them)
};

// The gradients one block contributes, given the attention's final out and lse over all keys and
// the gradient of out (the flash-attention backward, per block): dq from this block's keys, dk and
// dv of this block's keys.
AttentionGradients attention_block_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const at::Tensor& allowed, double scale, const at::Tensor& lse,
                                            const at::Tensor& out, const at::Tensor& dout);

}  // namespace mm
