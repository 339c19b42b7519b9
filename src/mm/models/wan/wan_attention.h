// diffusers' WanAttention with WanAttnProcessor: projections, RMS q/k norms over all heads,
// optional 3D rotary embedding (self-attention), and for image-conditioned cross-attention a
// second attention over the image tokens through add_k_proj / add_v_proj / norm_added_k, whose
// output is added to the text attention's.
// Parameter names: to_q, to_k, to_v, to_out.0 (weight, bias), norm_q.weight, norm_k.weight, and
// with added_kv_dim: add_k_proj, add_v_proj (weight, bias), norm_added_k.weight.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <optional>

#include "mm/nn/linear.h"
#include "mm/nn/sequence_split.h"
#include "mm/models/wan/wan_layers.h"

namespace mm {

struct WanRotaryTables;

class WanAttentionImpl : public torch::nn::Module {
 public:
  // dim: model width (= heads * head_dim); added_kv_dim: width of the image tokens, or none.
  WanAttentionImpl(int64_t dim, int64_t heads, double eps, std::optional<int64_t> added_kv_dim);

  // x: [batch, tokens, dim]; context: [batch, image_tokens + text_len, dim], the image tokens
  // first (undefined: self-attention over x); image_tokens > 0 needs added_kv_dim; rotary: tables
  // for the tokens of x, or null -> [batch, tokens, dim]. The image and text parts are slices of
  // one tensor, as in diffusers, so that the projections see the same (strided) inputs and round
  // alike in reduced precision. split (self-attention under context parallelism): x holds this
  // rank's tokens, and attention reaches the whole sequence through it.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& context, int64_t image_tokens,
                        const WanRotaryTables* rotary, const SequenceSplit* split = nullptr);

  Linear to_q{nullptr}, to_k{nullptr}, to_v{nullptr};
  torch::nn::ModuleList to_out{nullptr};  // [Linear] (diffusers' to_out.1 is a parameterless dropout)
  WanRMSNorm norm_q{nullptr}, norm_k{nullptr};
  Linear add_k_proj{nullptr}, add_v_proj{nullptr};  // null without added_kv_dim
  WanRMSNorm norm_added_k{nullptr};

 private:
  int64_t heads_;
};
TORCH_MODULE(WanAttention);

}  // namespace mm
