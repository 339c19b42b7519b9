#include "mm/nn/blockwise_attention.h"

#include <torch/torch.h>

#include <limits>

#include "mm/core/error.h"
#include "mm/core/host_to_device.h"
#include "mm/nn/compute_dtype.h"

namespace mm {
namespace {

// k or v [b, kv_heads, s, d] widened to the query's heads.
at::Tensor to_query_heads(const at::Tensor& t, int64_t heads) {
  const int64_t kv_heads = t.size(1);
  MM_CHECK(heads % kv_heads == 0, "attention: ", heads, " query heads do not group over ", kv_heads, " key/value heads");
  return kv_heads == heads ? t : t.repeat_interleave(heads / kv_heads, 1);
}

// [b, heads, s, d] gradients back to kv_heads heads: the sum over each group's query heads.
at::Tensor to_kv_heads(const at::Tensor& t, int64_t kv_heads) {
  const int64_t heads = t.size(1);
  if (heads == kv_heads) return t;
  auto sizes = t.sizes().vec();
  return t.view({sizes[0], kv_heads, heads / kv_heads, sizes[2], sizes[3]}).sum(2);
}

// Scores q k^T * scale in the compute dtype, -inf where not allowed: [b, h, sq, sk].
at::Tensor scores_of(const at::Tensor& q, const at::Tensor& k, const at::Tensor& allowed, double scale) {
  MM_CHECK(q.dim() == 4 && k.dim() == 4 && q.size(0) == k.size(0) && q.size(3) == k.size(3),
           "attention: q ", q.sizes(), " and k ", k.sizes(), " must be [batch, heads, len, dim] alike");
  const auto dtype = at_least_fp32(q.scalar_type());
  auto scores = torch::matmul(q.to(dtype), to_query_heads(k, q.size(1)).to(dtype).transpose(-1, -2)) * scale;
  if (allowed.defined()) {
    MM_CHECK(allowed.dim() == 2 && allowed.size(0) == q.size(2) && allowed.size(1) == k.size(2), "attention: allowed ",
             allowed.sizes(), " must be [", q.size(2), ", ", k.size(2), "]");
    scores = scores.masked_fill(to_device_async(allowed, scores.device()).logical_not(),
                                -std::numeric_limits<double>::infinity());
  }
  return scores;
}

// exp(scores - lse), 0 where lse is -inf (rows that see nothing).
at::Tensor probabilities(const at::Tensor& scores, const at::Tensor& lse) {
  const auto seen = torch::isfinite(lse).unsqueeze(-1);
  return torch::where(seen, (scores - torch::where(seen, lse.unsqueeze(-1), torch::zeros_like(lse).unsqueeze(-1))).exp(),
                      torch::zeros_like(scores));
}

// Which fused kernel takes a block: one every query sees whole goes, on the CPU, through torch's
// flash-attention kernel for the CPU (fp32 or fp64), on a GPU through the CUDA flash kernel
// (bf16/fp16, head dims up to 256 in multiples of 8, what autocast runs); each returns the
// log-sum-exp too and takes the final out and lse in its backward (what the ring needs), without
// the dense [q_len, k_len] scores. Masked blocks and other dtypes: the dense scores.
enum class FusedKernel { none, cpu_flash, cuda_flash };

FusedKernel fused_kernel(const at::Tensor& q, const at::Tensor& allowed) {
  const bool half = q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf;
  const int64_t dim = q.size(-1);
  const auto kernel = q.device().is_cpu() ? FusedKernel::cpu_flash
                      : q.is_cuda() && half && dim % 8 == 0 && dim <= 256 ? FusedKernel::cuda_flash
                                                                          : FusedKernel::none;
  if (kernel == FusedKernel::none || (allowed.defined() && !allowed.all().item<bool>())) return FusedKernel::none;
  return kernel;
}

}  // namespace

AttentionPart attention_with_lse(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& allowed, double scale) {
  const auto kernel = fused_kernel(q, allowed);
  if (kernel == FusedKernel::cuda_flash) {
    // out in q's dtype, lse [b, h, q_len] float32.
    const auto r = at::_scaled_dot_product_flash_attention(q.contiguous(), to_query_heads(k, q.size(1)).contiguous(),
                                                           to_query_heads(v, q.size(1)).contiguous(), 0.0, false,
                                                           false, scale);
    return {std::get<0>(r), std::get<1>(r)};
  }
  if (kernel == FusedKernel::cpu_flash) {
    const auto dtype = at_least_fp32(q.scalar_type());
    auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(
        q.to(dtype), to_query_heads(k, q.size(1)).to(dtype), to_query_heads(v, q.size(1)).to(dtype), 0.0, false, {},
        scale);
    return {out, lse.to(dtype)};
  }
  const auto scores = scores_of(q, k, allowed, scale);
  auto lse = torch::logsumexp(scores, -1);
  auto p = probabilities(scores, lse);
  return {torch::matmul(p, to_query_heads(v, q.size(1)).to(scores.scalar_type())), lse};
}

AttentionPart merge_attention_parts(const AttentionPart& a, const AttentionPart& b) {
  const auto lse = torch::logaddexp(a.lse, b.lse);
  const auto seen = torch::isfinite(lse);
  const auto safe = torch::where(seen, lse, torch::zeros_like(lse));
  auto weight = [&](const at::Tensor& part) {
    return torch::where(seen, (part - safe).exp(), torch::zeros_like(part)).unsqueeze(-1);
  };
  return {a.out * weight(a.lse) + b.out * weight(b.lse), lse};
}

AttentionGradients attention_block_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const at::Tensor& allowed, double scale, const at::Tensor& lse,
                                            const at::Tensor& out, const at::Tensor& dout) {
  const auto kernel = fused_kernel(q, allowed);
  if (kernel == FusedKernel::cuda_flash) {
    // No dropout: the philox seed and offset are not read; the final out in q's dtype, the lse in
    // float32, as the forward kernel gave them.
    const auto unused = at::empty({}, at::TensorOptions().dtype(at::kLong));
    const auto kq = to_query_heads(k, q.size(1)).contiguous(), vq = to_query_heads(v, q.size(1)).contiguous();
    auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_backward(
        dout.to(q.scalar_type()).contiguous(), q.contiguous(), kq, vq, out.to(q.scalar_type()).contiguous(),
        lse.to(at::kFloat).contiguous(), at::Tensor(), at::Tensor(), q.size(2), k.size(2), 0.0, false, unused, unused,
        scale);
    return {dq, to_kv_heads(dk, k.size(1)), to_kv_heads(dv, v.size(1))};
  }
  if (kernel == FusedKernel::cpu_flash) {
    const auto dtype = at_least_fp32(q.scalar_type());
    // The kernel's backward from the final output and log-sum-exp: this block's share of dq, and
    // the block's dk, dv.
    auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
        dout.to(dtype), q.to(dtype), to_query_heads(k, q.size(1)).to(dtype), to_query_heads(v, q.size(1)).to(dtype),
        out.to(dtype), lse.to(dtype), 0.0, false, {}, scale);
    return {dq, to_kv_heads(dk, k.size(1)), to_kv_heads(dv, v.size(1))};
  }
  const auto delta = (dout.to(out.scalar_type()) * out).sum(-1);
  const auto scores = scores_of(q, k, allowed, scale);
  const auto dtype = scores.scalar_type();
  const auto p = probabilities(scores, lse);
  const auto g = dout.to(dtype);
  const auto kq = to_query_heads(k, q.size(1)).to(dtype), vq = to_query_heads(v, q.size(1)).to(dtype);
  const auto dv = torch::matmul(p.transpose(-1, -2), g);
  const auto ds = p * (torch::matmul(g, vq.transpose(-1, -2)) - delta.unsqueeze(-1));
  const auto dq = torch::matmul(ds, kq) * scale;
  const auto dk = torch::matmul(ds.transpose(-1, -2), q.to(dtype)) * scale;
  return {dq, to_kv_heads(dk, k.size(1)), to_kv_heads(dv, v.size(1))};
}

}  // namespace mm
