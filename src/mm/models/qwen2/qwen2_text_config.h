// The Qwen2 decoder's architecture as the Qwen-VL models carry it (their config.json's text part):
// either top-level fields with `rope_scaling` (the published checkpoints) or a nested
// `text_config` with `rope_parameters` (transformers 5). Qwen3 and Qwen3-MoE are the same decoder
// with the options below the Qwen2 fields (their defaults are Qwen2's); models/qwen3 reads them.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace mm {

class JsonView;

// Qwen3-MoE's sparse layers. Layer i is sparse when num_experts > 0, i is not in mlp_only_layers
// and (i + 1) % decoder_sparse_step == 0 (transformers' Qwen3MoeDecoderLayer); the others keep
// the dense MLP of intermediate_size.
struct DecoderMoEConfig {
  int64_t num_experts = 0;  // 0: no sparse layer
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  double router_aux_loss_coef = 0.001;
  int64_t shared_expert_intermediate_size = 0;  // Qwen3.5-MoE's gated shared expert; 0: none

  bool is_sparse_layer(int64_t layer) const;
};

// Qwen3.5's Gated DeltaNet layers (config.json linear_*), see nn/gated_delta_net.h.
struct LinearAttentionConfig {
  int64_t num_key_heads = 16;    // linear_num_key_heads
  int64_t num_value_heads = 32;  // linear_num_value_heads, a multiple of num_key_heads
  int64_t key_head_dim = 128;    // linear_key_head_dim
  int64_t value_head_dim = 128;  // linear_value_head_dim
  int64_t conv_kernel = 4;       // linear_conv_kernel_dim
};

struct Qwen2TextConfig {
  int64_t vocab_size = 152064;
  int64_t hidden_size = 8192;
  int64_t intermediate_size = 29568;
  int64_t num_hidden_layers = 80;
  int64_t num_attention_heads = 64;
  int64_t num_key_value_heads = 8;
  std::string hidden_act = "silu";
  int64_t max_position_embeddings = 32768;
  double rms_norm_eps = 1e-6;
  double rope_theta = 1000000.0;
  std::vector<int64_t> mrope_section;  // [t, h, w] halves of head_dim; sums to head_dim / 2
  // The M-RoPE axes interleaved over the frequencies (Qwen3-VL) instead of in consecutive bands.
  bool mrope_interleaved = false;
  bool tie_word_embeddings = false;
  bool attention_bias = true;  // Qwen2 has q/k/v biases
  double initializer_range = 0.02;  // std of the random init of the language model and lm_head

  // Qwen3 and later.
  int64_t explicit_head_dim = 0;  // config.json head_dim; 0: hidden_size / num_attention_heads
  bool qk_norm = false;      // RMSNorm over head_dim on every query and key head, before rotary
  bool o_proj_bias = false;  // Qwen3 gives o_proj attention_bias too; Qwen2 never has one
  // The embedding row that gets no gradient (nn.Embedding's padding_idx, from pad_token_id); -1:
  // none. Read for Qwen3 only, so the Qwen-VL models train exactly as before.
  int64_t pad_token_id = -1;
  DecoderMoEConfig moe;

  // Qwen3.5 (qwen3_5_text), a hybrid decoder. Layer i mixes tokens by full attention or by a
  // Gated DeltaNet as layer_types[i] says (empty: full attention everywhere).
  std::vector<std::string> layer_types;  // "full_attention" | "linear_attention" per layer
  LinearAttentionConfig linear;
  // q_proj doubled: per head the query and a gate; the attention output times sigmoid(gate).
  bool attention_output_gate = false;
  // Every RMSNorm of the decoder (layer norms, q/k norms, final norm) scales by 1 + weight.
  bool zero_centered_norms = false;
  double partial_rotary_factor = 1.0;  // the leading fraction of head_dim that rotary turns
  // The multi-token-prediction head's depth (mtp_num_hidden_layers): one full-attention layer per
  // further token predicted; 0: none. Its embeddings are always the model's own (a config with
  // mtp_use_dedicated_embeddings is refused where the head is built).
  int64_t mtp_num_hidden_layers = 0;
  bool mtp_use_dedicated_embeddings = false;

  bool is_linear_attention_layer(int64_t layer) const;
  // The decoder the multi-token-prediction head's layers form: mtp_num_hidden_layers full-attention
  // layers, each sparse when the model has experts (as vLLM builds them).
  Qwen2TextConfig multi_token_prediction_layers() const;
  int64_t rotary_dim() const { return static_cast<int64_t>(static_cast<double>(head_dim()) * partial_rotary_factor); }
  int64_t head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : hidden_size / num_attention_heads; }
  // Sizes positive and consistent, and the decoder bounded by the machine's memory; errors name
  // the key.
  void validate() const;
  // The text fields of a Qwen-VL config.json (`root` is the whole file): text_config when present,
  // else the top level. Errors name the file and key.
  static Qwen2TextConfig from_json(const JsonView& root);
  // The fields every Qwen decoder's config.json spells alike (sizes, heads, act, eps, init range),
  // from the object `t` holding them.
  void read_common_fields(const JsonView& t);
  // Qwen3.5's text options (layer_types or the full_attention_interval pattern, linear_*, partial
  // rotary, head_dim, the gate and the zero-centred norms, Qwen3's qk-norm and biases), from the
  // object `t` holding them; read_common_fields first.
  void read_qwen3_5_fields(const JsonView& t);
  // The transformers 5 text_config, with `model_type` (e.g. "qwen2_5_vl_text").
  nlohmann::json to_json(const std::string& model_type) const;
};

}  // namespace mm
