// The Qwen2 decoder (HF: Qwen2Model / Qwen2_5_VLTextModel): token embedding, pre-norm decoder
// layers with grouped-query attention (q/k/v biases, no o bias) and a SwiGLU MLP, final RMSNorm.
// Positions are 1D ([batch, seq]) or, when the config has an mrope_section, Qwen2-VL's M-RoPE
// ([3, batch, seq]), in bands or interleaved (Qwen3-VL). Parameter names follow the checkpoints: embed_tokens.weight,
// layers.N.self_attn.{q,k,v,o}_proj.*, layers.N.mlp.{gate,up,down}_proj.weight,
// layers.N.{input,post_attention}_layernorm.weight, norm.weight. The lm_head (tied or not) belongs
// to the model that owns this decoder.
// Qwen3 and Qwen3-MoE are this decoder with the config's options (as transformers derives them
// from Qwen2): an RMSNorm over head_dim on each query and key head before rotary
// (self_attn.{q,k}_norm.weight), head_dim independent of hidden_size, an o_proj bias with
// attention_bias, and sparse MoE layers (layers.N.mlp.gate.weight, layers.N.mlp.experts.E.*).
// Qwen3.5's hybrid decoder is this one too: layers whose config.layer_types entry is
// "linear_attention" mix tokens by a Gated DeltaNet (layers.N.linear_attn.*) instead of
// self_attn; its attention layers gate their output (q_proj doubled), rotary turns a fraction of
// head_dim, and every RMSNorm scales by 1 + weight.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

#include "mm/nn/block_runner.h"
#include "mm/nn/gated_delta_net.h"
#include "mm/nn/gated_mlp.h"
#include "mm/nn/linear.h"
#include "mm/nn/moe.h"
#include "mm/nn/norms.h"
#include "mm/nn/rotary.h"
#include "mm/nn/sequence_split.h"
#include "mm/nn/varlen_attention.h"
#include "mm/models/qwen2/qwen2_text_config.h"

#include <memory>
#include <vector>

namespace mm {

class KVCache;

// How a layer attends: an explicit boolean mask (true = attend), [batch, 1, q_len, kv_len], or
// none with is_causal saying whether to apply the causal triangle; or, for packed samples,
// their segments (causal within each, nothing across), whose attention is linear in memory:
// flash-attention's varlen kernel on a GPU in bf16, SDPA per segment length elsewhere.
// Gated DeltaNet layers read no mask but the two fields below (their state runs causally anyway).
struct AttentionMask {
  torch::Tensor mask;
  bool is_causal = false;
  std::shared_ptr<const VarlenSegments> segments;
  // [batch, seq] 1 = token, 0 = padding, over this forward's positions, when some are padding
  // (as transformers' create_recurrent_attention_mask: never for a one-token decode step).
  torch::Tensor linear_padding;
  std::vector<int64_t> cu_seqlens;  // packed samples: where the DeltaNet state and conv window restart
  // Context parallelism: this forward holds some of the sequence's tokens, and attention reaches
  // the rest through the split (causal within each document as the split was made).
  std::shared_ptr<const SequenceSplit> split;
};

// Causal attention for q_len new positions after `past` cached ones. padding_mask: [batch,
// past + q_len] with 1 for real tokens and 0 for (left) padding, or undefined for none. Padded
// query rows may attend to themselves only, so no row is empty (an empty row gives NaN).
AttentionMask make_causal_mask(const torch::Tensor& padding_mask, int64_t q_len, int64_t past,
                               const c10::Device& device);

// Causal attention within each packed segment [cu_seqlens[i], cu_seqlens[i+1]) of a sequence of
// cu_seqlens.back() positions, nothing across segments (a segments mask: no [seq, seq] tensor).
// cu_seqlens must start at 0 and increase strictly.
AttentionMask make_packed_causal_mask(const std::vector<int64_t>& cu_seqlens, const c10::Device& device);

// DeepStack (Qwen3-VL): vision features added to the hidden states at the visual positions after
// each of the first decoder layers, embeds[i] after layer i (HF: Qwen3VLTextModel._deepstack_process).
struct DeepstackInputs {
  torch::Tensor visual_mask;          // [batch, seq] bool: the image and video placeholder positions
  std::vector<torch::Tensor> embeds;  // [visual positions, hidden] each, in the mask's row-major order

  bool empty() const { return embeds.empty(); }
};

class Qwen2AttentionImpl : public torch::nn::Module {
 public:
  Qwen2AttentionImpl(const Qwen2TextConfig& config, int64_t layer_index);
  // x: [batch, seq, hidden]; rope: [batch, seq, head_dim]. With a cache, this layer's keys and
  // values are appended to it and attention covers the cached prefix. Returns [batch, seq, hidden].
  torch::Tensor forward(const torch::Tensor& x, const RotaryCosSin& rope, const AttentionMask& mask,
                        KVCache* cache);

  // q [heads * head_dim, hidden] (with the output gate [heads * 2 * head_dim, hidden]: per head
  // its query then its gate), k and v [kv_heads * head_dim, hidden], o [hidden, heads * head_dim]
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};  // [head_dim], only with config.qk_norm

 private:
  int64_t layer_index_, num_heads_, num_kv_heads_, head_dim_;
  bool output_gate_;
};
TORCH_MODULE(Qwen2Attention);

class Qwen2DecoderLayerImpl : public torch::nn::Module {
 public:
  Qwen2DecoderLayerImpl(const Qwen2TextConfig& config, int64_t layer_index);
  // x: [batch, seq, hidden] -> [batch, seq, hidden]. balance: see SparseMoeBlockImpl::forward.
  torch::Tensor forward(const torch::Tensor& x, const RotaryCosSin& rope, const AttentionMask& mask,
                        KVCache* cache, LoadBalancingLoss* balance = nullptr);

  // One of the two token mixers, as config.layer_types says: attention, or a Gated DeltaNet.
  Qwen2Attention self_attn{nullptr};
  GatedDeltaNet linear_attn{nullptr};
  // One of the two, registered as "mlp": the dense MLP, or the experts of a sparse layer
  // (config.moe.is_sparse_layer).
  GatedMLP mlp{nullptr};  // no biases, act = config.hidden_act
  SparseMoeBlock moe{nullptr};
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};

 private:
  int64_t layer_index_;  // which of the cache's layers is this one's
};
TORCH_MODULE(Qwen2DecoderLayer);

// What every layer of one forward shares: the rotary cos/sin of the positions and the mask.
struct DecoderContext {
  RotaryCosSin rope;
  AttentionMask mask;
};

class Qwen2ModelImpl : public torch::nn::Module {
 public:
  explicit Qwen2ModelImpl(const Qwen2TextConfig& config);

  // inputs_embeds: [batch, seq, hidden]
  // position_ids:  [3, batch, seq] (M-RoPE configs) or [batch, seq] (1D RoPE) int64
  // padding_mask:  [batch, cached + seq], 1 = token, 0 = padding; undefined = no padding
  // cache:         optional; the new keys/values are appended
  // cu_seqlens:    packed samples: empty, or [0, end of sample 0, ..., seq] with batch 1, no
  //                padding mask and no cache; attention stays causal within each sample, and a
  //                Gated DeltaNet layer's state and conv window restart at each
  // deepstack:     optional vision features for the first layers (no more than there are layers);
  //                with a split, over the whole sequence (each rank adds its tokens' own)
  // split:         context parallelism: inputs_embeds and position_ids hold this rank's tokens
  //                (split->positions) of a sequence whose documents the split was made for; no
  //                padding mask, cu_seqlens or cache then (a right-padded row is one causal
  //                document whose padding no real token sees); attention layers only
  // returns:       [batch, seq, hidden], after the final norm
  torch::Tensor forward(const torch::Tensor& inputs_embeds, const torch::Tensor& position_ids,
                        const torch::Tensor& padding_mask = {}, KVCache* cache = nullptr,
                        const std::vector<int64_t>& cu_seqlens = {}, const DeepstackInputs* deepstack = nullptr,
                        std::shared_ptr<const SequenceSplit> split = nullptr);

  // The rotary tables and the mask forward builds for these arguments (checked as forward checks
  // them); a head over the same positions (multi-token prediction) runs its layers with them.
  DecoderContext context(const torch::Tensor& inputs_embeds, const torch::Tensor& position_ids,
                         const torch::Tensor& padding_mask = {}, KVCache* cache = nullptr,
                         const std::vector<int64_t>& cu_seqlens = {},
                         std::shared_ptr<const SequenceSplit> split = nullptr) const;

  // input_ids: [batch, seq] int64 -> [batch, seq, hidden]
  torch::Tensor embed(const torch::Tensor& input_ids);

  const Qwen2TextConfig& config() const { return config_; }

  // The router logits of the last forward, one [batch * seq, num_experts] per sparse layer in
  // layer order (empty for a dense decoder): what load_balancing_loss reads.
  std::vector<torch::Tensor> router_logits() const;

  // The load-balancing loss the coming training forwards feed (nullptr: none): each forward
  // hands it to every sparse layer, and a layer recomputed in backward gets the one its forward
  // had even if this was changed since. Ignored by a dense decoder.
  void set_load_balancing(std::shared_ptr<LoadBalancingLoss> loss) { load_balancing_ = std::move(loss); }

  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};

  // When set, every decoder layer runs through it (recomputation, sharding); else directly.
  // With a cache a runner must call `run` once per forward (recomputing would append twice).
  BlockRunner block_runner;

 private:
  Qwen2TextConfig config_;
  std::shared_ptr<LoadBalancingLoss> load_balancing_;
};
TORCH_MODULE(Qwen2Model);

}  // namespace mm
