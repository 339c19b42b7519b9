#include "mm/nn/compute_dtype.h"
#include "mm/models/wan/wan_block.h"

#include <torch/torch.h>

#include <cmath>

namespace mm {

WanTransformerBlockImpl::WanTransformerBlockImpl(const WanTransformerConfig& config) {
  const int64_t dim = config.inner_dim();
  const int64_t heads = config.num_attention_heads;
  norm1 = register_module("norm1", WanFP32LayerNorm(dim, config.eps, false));
  attn1 = register_module("attn1", WanAttention(dim, heads, config.eps, std::nullopt));
  attn2 = register_module("attn2", WanAttention(dim, heads, config.eps, config.added_kv_proj_dim));
  if (config.cross_attn_norm) norm2 = register_module("norm2", WanFP32LayerNorm(dim, config.eps, true));
  ffn = register_module("ffn", WanFeedForward(dim, config.ffn_dim, dim, "tanh"));
  norm3 = register_module("norm3", WanFP32LayerNorm(dim, config.eps, false));
  scale_shift_table =
      register_parameter("scale_shift_table", torch::randn({1, 6, dim}) / std::sqrt(static_cast<double>(dim)));
}

torch::Tensor WanTransformerBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& context,
                                               int64_t image_tokens, const torch::Tensor& timestep_proj,
                                               const WanRotaryTables& rotary, const SequenceSplit* split) {
  const auto dtype = x.scalar_type();
  const auto fp32 = at_least_fp32(dtype);  // diffusers' fp32 residual stream; fp64 stays fp64
  // [batch, 1 or tokens, 6, dim] in fp32: shift, scale, gate (attention), then (feed-forward).
  const auto modulation = scale_shift_table.unsqueeze(0) + timestep_proj.to(fp32);
  auto part = [&](int64_t i) { return modulation.select(2, i); };

  auto h = x;
  auto normed = (norm1(h.to(fp32)) * (1 + part(1)) + part(0)).to(dtype);
  h = (h.to(fp32) + attn1->forward(normed, torch::Tensor(), 0, &rotary, split) * part(2)).to(dtype);

  normed = norm2 ? norm2(h.to(fp32)).to(dtype) : h;
  h = h + attn2->forward(normed, context, image_tokens, nullptr);

  normed = (norm3(h.to(fp32)) * (1 + part(4)) + part(3)).to(dtype);
  h = (h.to(fp32) + ffn(normed).to(fp32) * part(5)).to(dtype);
  return h;
}

}  // namespace mm
