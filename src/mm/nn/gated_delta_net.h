// Gated DeltaNet, the linear-attention layer of Qwen3.5's hybrid decoder (three of every four
// layers), as transformers' Qwen3_5GatedDeltaNet computes it:
//   in_proj_qkv -> short causal depthwise conv1d + SiLU -> split q, k, v per head;
//   q, k L2-normalised (q scaled by 1/sqrt(key_dim)), key heads repeated up to the value heads;
//   beta = sigmoid(in_proj_b x), g = -exp(A_log) * softplus(in_proj_a x + dt_bias);
//   the gated delta rule (gated_delta_rule.h) -> gated RMSNorm with gate in_proj_z x -> out_proj.
// Parameter names are the checkpoints' (below `linear_attn.`): in_proj_qkv, in_proj_z, in_proj_b,
// in_proj_a, out_proj (Linears, so LoRA attaches as anywhere), conv1d.weight
// [conv_dim, 1, kernel], dt_bias [value_heads], A_log [value_heads], norm.weight [value_dim].
//
// Three ways through the same layer:
//   - plain: [batch, seq] rows, chunked delta rule (training, prefill);
//   - packed: one row holding several samples (cu_seqlens): the conv window and the recurrent
//     state restart at every sample, so the row equals its samples run alone;
//   - cached: continuing from a DeltaNetCache (decode); one new token takes the recurrent step,
//     several the chunked form from the cached state;
//   - context-parallel: this rank holds some of the sequence's tokens (nn/sequence_split.h). The
//     recurrence needs the whole sequence in order, and its heads are independent, so the layer
//     runs head-parallel: the projections on this rank's tokens, one all-to-all to the whole
//     sequence for a share of the heads (q and k of a key head travel with the value heads that
//     read it; with fewer key heads than ranks, q and k go per value head), the conv and the rule
//     on it (per document), one all-to-all back, the gated norm and out_proj on this rank's tokens.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "mm/nn/gated_delta_rule.h"
#include "mm/nn/kv_cache.h"
#include "mm/nn/linear.h"
#include "mm/nn/norms.h"
#include "mm/nn/sequence_split.h"

namespace mm {

struct GatedDeltaNetOptions {
  int64_t hidden_size = 0;
  int64_t num_key_heads = 0;    // HF linear_num_key_heads
  int64_t num_value_heads = 0;  // HF linear_num_value_heads, a multiple of num_key_heads
  int64_t key_head_dim = 0;     // HF linear_key_head_dim
  int64_t value_head_dim = 0;   // HF linear_value_head_dim
  int64_t conv_kernel = 4;      // HF linear_conv_kernel_dim
  double eps = 1e-6;            // HF rms_norm_eps, of the gated norm
  std::string activation = "silu";  // HF hidden_act, after the conv
  // Tokens per chunk of the chunked form. Neither transformers (its torch path fixes 64) nor the
  // published configs set one; 64 is FLA's. Any value gives the same result up to rounding.
  int64_t chunk_size = 64;

  int64_t key_dim() const { return num_key_heads * key_head_dim; }
  int64_t value_dim() const { return num_value_heads * value_head_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }  // channels of q, k, v
};

class GatedDeltaNetImpl : public torch::nn::Module {
 public:
  explicit GatedDeltaNetImpl(const GatedDeltaNetOptions& options);

  // x: [batch, seq, hidden] -> [batch, seq, hidden].
  // attention_mask: [batch, seq], 1 for tokens, 0 for padding (zeroed on the way in, as
  //   transformers does, so left padding leaves the state at zero); undefined = all tokens.
  // cu_seqlens: a packed row (batch 1): the sample boundaries, 0 .. seq; empty = one sample.
  // cache: start from it (an empty one = zeros) and leave the state after the last token in it.
  //   Not with cu_seqlens.
  // split: x holds this rank's tokens of a context-parallel split (which has the documents); alone,
  //   without mask, cu_seqlens or cache. linear_num_key_heads or linear_num_value_heads must be a
  //   multiple of its ranks.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& attention_mask = {},
                        const std::vector<int64_t>& cu_seqlens = {}, DeltaNetCache* cache = nullptr,
                        const SequenceSplit* split = nullptr);

  const GatedDeltaNetOptions& options() const { return options_; }

  Linear in_proj_qkv{nullptr}, in_proj_z{nullptr}, in_proj_b{nullptr}, in_proj_a{nullptr}, out_proj{nullptr};
  std::shared_ptr<torch::nn::Module> conv1d;  // holds "weight" [conv_dim, 1, conv_kernel]
  torch::Tensor conv_weight, dt_bias, A_log;
  GatedRMSNorm norm{nullptr};

 private:
  // mixed: [batch, channels, seq] through `weight` [channels, 1, kernel] (conv_weight, or the rows
  // of this rank's heads) -> the activated causal conv, same shape.
  torch::Tensor causal_conv(const torch::Tensor& mixed, const torch::Tensor& weight,
                            const std::vector<int64_t>& cu_seqlens, DeltaNetCache* cache) const;
  // From mixed q|k|v (conv output) and the gates' inputs on the whole sequence to the rule's output
  // [batch, seq, value heads, value_head_dim] (fp32, or fp64) and final state: what both the local
  // and the head-parallel path run; `cache`, when given, starts the rule and keeps its state. q, k: [batch, seq, key heads, key_head_dim] with `group` value heads
  // each; v: [batch, seq, value heads, value_head_dim]; a, b: [batch, seq, value heads];
  // A_log and dt_bias: those heads' rows.
  DeltaRuleOutput delta_rule(torch::Tensor q, torch::Tensor k, const torch::Tensor& v, const torch::Tensor& a,
                             const torch::Tensor& b, const torch::Tensor& A_log, const torch::Tensor& dt_bias,
                             int64_t group, const std::vector<int64_t>& cu_seqlens, DeltaNetCache* cache) const;
  torch::Tensor forward_split(const torch::Tensor& x, const SequenceSplit& split);

  GatedDeltaNetOptions options_;
};
TORCH_MODULE(GatedDeltaNet);

}  // namespace mm
