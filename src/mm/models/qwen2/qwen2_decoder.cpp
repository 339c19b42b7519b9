#include "mm/models/qwen2/qwen2_decoder.h"

#include <torch/torch.h>

#include <cmath>

#include "mm/core/error.h"
#include "mm/core/host_to_device.h"
#include "mm/nn/kv_cache.h"
#include "mm/nn/parameter_init.h"

namespace mm {

AttentionMask make_causal_mask(const torch::Tensor& padding_mask, int64_t q_len, int64_t past,
                               const c10::Device& device) {
  const int64_t kv_len = past + q_len;
  const bool padded = padding_mask.defined() && !padding_mask.to(torch::kBool).all().item<bool>();
  if (!padded) {
    // Without padding SDPA's own masking suffices: upper-left causal alignment equals ours when
    // there is no prefix, and a single new token sees everything.
    AttentionMask plain;
    plain.is_causal = past == 0;
    if (past == 0 || q_len == 1) return plain;
  } else {
    MM_CHECK(padding_mask.dim() == 2 && padding_mask.size(1) == kv_len, "attention_mask must be [batch, ",
             kv_len, "] (cached + new positions), got ", padding_mask.sizes());
  }
  auto q_pos = torch::arange(past, kv_len, torch::TensorOptions().dtype(torch::kInt64).device(device));
  auto kv_pos = torch::arange(kv_len, torch::TensorOptions().dtype(torch::kInt64).device(device));
  auto allowed = kv_pos.view({1, kv_len}) <= q_pos.view({q_len, 1});  // [q, kv]
  torch::Tensor mask = allowed.view({1, 1, q_len, kv_len});
  if (padded) {
    auto keys = to_device_async(padding_mask, device).to(torch::kBool).view({-1, 1, 1, kv_len});
    auto self = (kv_pos.view({1, kv_len}) == q_pos.view({q_len, 1})).view({1, 1, q_len, kv_len});
    mask = (mask & keys) | self;
  }
  AttentionMask out;
  out.mask = mask;
  return out;
}

AttentionMask make_packed_causal_mask(const std::vector<int64_t>& cu_seqlens, const c10::Device& device) {
  MM_CHECK(cu_seqlens.size() >= 2 && cu_seqlens.front() == 0,
           "cu_seqlens must start at 0 and hold at least one segment, got ", c10::str(cu_seqlens));
  for (size_t i = 1; i < cu_seqlens.size(); ++i)
    MM_CHECK(cu_seqlens[i] > cu_seqlens[i - 1], "cu_seqlens must increase strictly, got ", c10::str(cu_seqlens));
  AttentionMask mask;
  mask.is_causal = true;
  mask.segments = std::make_shared<const VarlenSegments>(cu_seqlens, device);
  return mask;
}

Qwen2AttentionImpl::Qwen2AttentionImpl(const Qwen2TextConfig& config, int64_t layer_index)
    : layer_index_(layer_index),
      num_heads_(config.num_attention_heads),
      num_kv_heads_(config.num_key_value_heads),
      head_dim_(config.head_dim()),
      output_gate_(config.attention_output_gate) {
  const int64_t hidden = config.hidden_size;
  q_proj = register_module("q_proj", Linear(hidden, num_heads_ * head_dim_ * (output_gate_ ? 2 : 1),
                                            config.attention_bias));
  k_proj = register_module("k_proj", Linear(hidden, num_kv_heads_ * head_dim_, config.attention_bias));
  v_proj = register_module("v_proj", Linear(hidden, num_kv_heads_ * head_dim_, config.attention_bias));
  o_proj = register_module("o_proj", Linear(num_heads_ * head_dim_, hidden, config.o_proj_bias));
  if (config.qk_norm) {
    q_norm = register_module("q_norm", RMSNorm(head_dim_, config.rms_norm_eps, config.zero_centered_norms));
    k_norm = register_module("k_norm", RMSNorm(head_dim_, config.rms_norm_eps, config.zero_centered_norms));
  }
}

torch::Tensor Qwen2AttentionImpl::forward(const torch::Tensor& x, const RotaryCosSin& rope,
                                          const AttentionMask& mask, KVCache* cache) {
  const int64_t batch = x.size(0), seq = x.size(1);
  auto heads = [&](const torch::Tensor& t) { return t.view({batch, seq, -1, head_dim_}).transpose(1, 2); };
  torch::Tensor q, gate;
  if (output_gate_) {
    // Per head [query | gate] (transformers' chunk of the [.., heads, 2 * head_dim] view).
    auto both = q_proj(x).view({batch, seq, num_heads_, 2 * head_dim_});
    q = both.narrow(-1, 0, head_dim_).transpose(1, 2);
    gate = both.narrow(-1, head_dim_, head_dim_).reshape({batch, seq, num_heads_ * head_dim_});
  } else {
    q = heads(q_proj(x));
  }
  auto k = heads(k_proj(x));
  if (q_norm) {  // over head_dim, so per head whatever the layout
    q = q_norm(q);
    k = k_norm(k);
  }
  q = apply_rotary(q, rope);
  k = apply_rotary(k, rope);
  auto v = heads(v_proj(x));
  if (cache) std::tie(k, v) = cache->update(layer_index_, k, v);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
  // Packed samples (batch 1): [1, heads, seq, head_dim] -> the varlen layout [seq, heads, head_dim].
  auto packed = [](const torch::Tensor& t) { return t[0].transpose(0, 1); };
  torch::Tensor out;
  if (mask.split) {
    out = mask.split->attention(q, k, v, scale).transpose(1, 2).reshape({batch, seq, num_heads_ * head_dim_});
  } else if (mask.segments) {
    out = mask.segments->attention(packed(q), packed(k), packed(v), scale, /*causal=*/true)
              .reshape({batch, seq, num_heads_ * head_dim_});
  } else {
    out = at::scaled_dot_product_attention(q, k, v, mask.mask.defined() ? std::optional(mask.mask) : std::nullopt,
                                           /*dropout_p=*/0.0, mask.is_causal, scale,
                                           /*enable_gqa=*/num_kv_heads_ != num_heads_)
              .transpose(1, 2)
              .reshape({batch, seq, num_heads_ * head_dim_});
  }
  if (output_gate_) out = out * torch::sigmoid(gate);
  return o_proj(out);
}

Qwen2DecoderLayerImpl::Qwen2DecoderLayerImpl(const Qwen2TextConfig& config, int64_t layer_index)
    : layer_index_(layer_index) {
  if (config.is_linear_attention_layer(layer_index)) {
    GatedDeltaNetOptions o;
    o.hidden_size = config.hidden_size;
    o.num_key_heads = config.linear.num_key_heads;
    o.num_value_heads = config.linear.num_value_heads;
    o.key_head_dim = config.linear.key_head_dim;
    o.value_head_dim = config.linear.value_head_dim;
    o.conv_kernel = config.linear.conv_kernel;
    o.eps = config.rms_norm_eps;
    o.activation = config.hidden_act;
    linear_attn = register_module("linear_attn", GatedDeltaNet(o));
  } else {
    self_attn = register_module("self_attn", Qwen2Attention(config, layer_index));
  }
  if (config.moe.is_sparse_layer(layer_index)) {
    moe = register_module("mlp", SparseMoeBlock(MoEOptions{config.hidden_size, config.moe.moe_intermediate_size,
                                                           config.moe.num_experts, config.moe.num_experts_per_tok,
                                                           config.moe.norm_topk_prob, config.hidden_act,
                                                           config.moe.shared_expert_intermediate_size}));
  } else {
    mlp = register_module("mlp", GatedMLP(config.hidden_size, config.intermediate_size, /*bias=*/false,
                                          config.hidden_act));
  }
  const bool zero_centered = config.zero_centered_norms;
  input_layernorm =
      register_module("input_layernorm", RMSNorm(config.hidden_size, config.rms_norm_eps, zero_centered));
  post_attention_layernorm =
      register_module("post_attention_layernorm", RMSNorm(config.hidden_size, config.rms_norm_eps, zero_centered));
}

torch::Tensor Qwen2DecoderLayerImpl::forward(const torch::Tensor& x, const RotaryCosSin& rope,
                                             const AttentionMask& mask, KVCache* cache, LoadBalancingLoss* balance) {
  auto normed_x = input_layernorm(x);
  auto h = x + (linear_attn ? linear_attn->forward(normed_x, mask.linear_padding, mask.cu_seqlens,
                                                   cache ? &cache->linear_state(layer_index_) : nullptr,
                                                   mask.split.get())
                            : self_attn->forward(normed_x, rope, mask, cache));
  auto normed = post_attention_layernorm(h);
  return h + (moe ? moe->forward(normed, balance) : mlp(normed));
}

Qwen2ModelImpl::Qwen2ModelImpl(const Qwen2TextConfig& config) : config_(config) {
  embed_tokens = register_module("embed_tokens", embedding(config.vocab_size, config.hidden_size));
  // Set after construction: it only masks the row's gradient (the checkpoint provides the row).
  if (config.pad_token_id >= 0) embed_tokens->options.padding_idx(config.pad_token_id);
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) layers->push_back(Qwen2DecoderLayer(config, i));
  norm = register_module("norm", RMSNorm(config.hidden_size, config.rms_norm_eps, config.zero_centered_norms));
}

std::vector<torch::Tensor> Qwen2ModelImpl::router_logits() const {
  std::vector<torch::Tensor> out;
  for (const auto& item : *layers)
    if (const auto& moe = item->as<Qwen2DecoderLayer>()->moe) out.push_back(moe->router_logits());
  return out;
}

torch::Tensor Qwen2ModelImpl::embed(const torch::Tensor& input_ids) {
  return embed_tokens(to_device_async(input_ids, embed_tokens->weight.device()));
}

DecoderContext Qwen2ModelImpl::context(const torch::Tensor& inputs_embeds, const torch::Tensor& position_ids,
                                       const torch::Tensor& padding_mask, KVCache* cache,
                                       const std::vector<int64_t>& cu_seqlens,
                                       std::shared_ptr<const SequenceSplit> split) const {
  MM_CHECK(inputs_embeds.dim() == 3 && inputs_embeds.size(2) == config_.hidden_size,
           "Qwen2Model: inputs_embeds must be [batch, seq, ", config_.hidden_size, "], got ", inputs_embeds.sizes());
  const int64_t seq = inputs_embeds.size(1);
  const auto device = inputs_embeds.device();
  auto positions = to_device_async(position_ids, device);
  auto inv_freq = rope_inv_freq(config_.rotary_dim(), config_.rope_theta, device);
  const bool mrope = !config_.mrope_section.empty();
  MM_CHECK(positions.size(-1) == seq && positions.size(-2) == inputs_embeds.size(0),
           "Qwen2Model: position_ids ", positions.sizes(), " do not match inputs_embeds ", inputs_embeds.sizes());
  const auto dtype = inputs_embeds.scalar_type();
  const RotaryCosSin rope = !mrope ? rope_cos_sin(inv_freq, positions, dtype)
                            : config_.mrope_interleaved
                                ? interleaved_mrope_cos_sin(inv_freq, positions, config_.mrope_section, dtype)
                                : mrope_cos_sin(inv_freq, positions, config_.mrope_section, dtype);
  const int64_t past = cache ? cache->length() : 0;
  AttentionMask mask;
  if (split) {
    MM_CHECK(cu_seqlens.empty() && !padding_mask.defined() && !cache,
             "Qwen2Model: a context-parallel forward takes no cu_seqlens, attention mask or cache (the split has them)");
    MM_CHECK(split->positions.size() == static_cast<size_t>(seq), "Qwen2Model: the context-parallel split holds ",
             split->positions.size(), " tokens here but inputs_embeds has ", seq);
    mask.split = std::move(split);
  } else if (cu_seqlens.empty()) {
    mask = make_causal_mask(padding_mask, seq, past, device);
  } else {
    MM_CHECK(inputs_embeds.size(0) == 1 && !padding_mask.defined() && !cache,
             "Qwen2Model: packed sequences (cu_seqlens) need batch 1, no attention mask and no cache");
    MM_CHECK(cu_seqlens.back() == seq, "Qwen2Model: cu_seqlens ends at ", cu_seqlens.back(),
             " but the packed sequence has ", seq, " positions");
    mask = make_packed_causal_mask(cu_seqlens, device);
    mask.cu_seqlens = cu_seqlens;
  }
  // The DeltaNet layers' view of the padding: this forward's positions, when some are padding
  // (decided where the mask is, the host in training, before it moves).
  if (padding_mask.defined() && seq > 1) {
    auto recent = padding_mask.narrow(1, padding_mask.size(1) - seq, seq);
    if (!recent.to(torch::kBool).all().item<bool>()) mask.linear_padding = to_device_async(recent, device);
  }
  return {rope, std::move(mask)};
}

torch::Tensor Qwen2ModelImpl::forward(const torch::Tensor& inputs_embeds, const torch::Tensor& position_ids,
                                      const torch::Tensor& padding_mask, KVCache* cache,
                                      const std::vector<int64_t>& cu_seqlens, const DeepstackInputs* deepstack,
                                      std::shared_ptr<const SequenceSplit> split) {
  const DecoderContext shared = context(inputs_embeds, position_ids, padding_mask, cache, cu_seqlens, split);
  const RotaryCosSin& rope = shared.rope;
  const AttentionMask& mask = shared.mask;
  const auto device = inputs_embeds.device();
  torch::Tensor visual_mask, visual_rows;  // visual_rows: which of the features this forward's positions add
  if (deepstack && !deepstack->empty()) {
    MM_CHECK(deepstack->embeds.size() <= layers->size(), "Qwen2Model: ", deepstack->embeds.size(),
             " DeepStack features for a decoder of ", layers->size(), " layers");
    visual_mask = to_device_async(deepstack->visual_mask, device).to(torch::kBool);
    if (shared.mask.split) {
      // The features are in the whole sequence's row-major order of visual positions: number
      // them, then keep this rank's positions (in the order it holds them).
      const auto& split = *shared.mask.split;
      const auto order = (visual_mask.flatten().to(torch::kInt64).cumsum(0) - 1).view(visual_mask.sizes());
      visual_mask = split.take(visual_mask, 1);
      visual_rows = split.take(order, 1).index({visual_mask});
    }
    MM_CHECK(visual_mask.sizes() == inputs_embeds.sizes().slice(0, 2), "Qwen2Model: the DeepStack visual mask ",
             visual_mask.sizes(), " does not match inputs_embeds ", inputs_embeds.sizes());
  }
  auto h = inputs_embeds;
  for (size_t i = 0; i < layers->size(); ++i) {
    auto* layer = layers[i]->as<Qwen2DecoderLayer>();
    if (!block_runner) {
      h = layer->forward(h, rope, mask, cache, load_balancing_.get());
    } else {
      // The runner may call `run` again in backward, after this frame is gone: capture by value.
      h = block_runner(
          *layer,
          [layer, rope, mask, cache, balance = load_balancing_](const torch::Tensor& x) {
            return layer->forward(x, rope, mask, cache, balance.get());
          },
          h);
    }
    if (visual_mask.defined() && i < deepstack->embeds.size()) {
      // h[mask] += embeds: written as an add of the features scattered over zeros, whose
      // backward is a plain gather (the boolean-index form's backward was the slow part); the
      // visual positions get h + e exactly as the reference's, the others h + 0.
      auto features = to_device_async(deepstack->embeds[i], device).to(h.scalar_type());
      if (visual_rows.defined()) features = features.index_select(0, visual_rows);
      h = h + torch::zeros_like(h).masked_scatter(visual_mask.unsqueeze(-1), features);
    }
  }
  return norm(h);
}

}  // namespace mm
