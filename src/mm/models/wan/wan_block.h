// diffusers' WanTransformerBlock: modulated self-attention with 3D rotary embedding, (optionally
// normed) cross-attention to the text (and image) tokens, modulated GELU(tanh) feed-forward. The
// modulation (shift, scale, gate for attention and feed-forward) is scale_shift_table + the
// projected timestep embedding, in fp32; the residual stream is updated in fp32 and stored in the
// input's dtype, as diffusers does.
// Parameter names below blocks.N.: attn1.*, attn2.* (see wan_attention.h), norm2.{weight,bias}
// (cross_attn_norm), ffn.net.0.proj, ffn.net.2 (weight, bias), scale_shift_table [1, 6, dim].
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "mm/models/wan/wan_attention.h"
#include "mm/models/wan/wan_layers.h"
#include "mm/models/wan/wan_transformer_config.h"

namespace mm {

class WanTransformerBlockImpl : public torch::nn::Module {
 public:
  explicit WanTransformerBlockImpl(const WanTransformerConfig& config);

  // x: [batch, tokens, dim]; context: [batch, image_tokens + text_len, dim] (embedded image tokens,
  // if any, then text); timestep_proj: [batch, 1 or tokens, 6, dim]; rotary: tables for the tokens
  // -> [batch, tokens, dim]. split: context parallelism (x, timestep_proj and rotary hold this
  // rank's tokens; the self-attention reaches the rest through it).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& context, int64_t image_tokens,
                        const torch::Tensor& timestep_proj, const WanRotaryTables& rotary,
                        const SequenceSplit* split = nullptr);

  WanFP32LayerNorm norm1{nullptr};  // no affine
  WanAttention attn1{nullptr};
  WanAttention attn2{nullptr};
  WanFP32LayerNorm norm2{nullptr};  // null without cross_attn_norm (diffusers' Identity)
  WanFeedForward ffn{nullptr};
  WanFP32LayerNorm norm3{nullptr};  // no affine
  torch::Tensor scale_shift_table;  // [1, 6, dim]
};
TORCH_MODULE(WanTransformerBlock);

}  // namespace mm
