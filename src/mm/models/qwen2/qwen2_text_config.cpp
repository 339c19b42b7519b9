#include "mm/models/qwen2/qwen2_text_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <numeric>

#include "mm/core/config_checks.h"
#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/core/memory_bounds.h"

namespace mm {

void Qwen2TextConfig::validate() const {
  require_positive("config.json: text_config.", {{"vocab_size", vocab_size},
                                                 {"hidden_size", hidden_size},
                                                 {"num_hidden_layers", num_hidden_layers},
                                                 {"num_attention_heads", num_attention_heads},
                                                 {"num_key_value_heads", num_key_value_heads}});
  MM_CHECK(explicit_head_dim > 0 || hidden_size % num_attention_heads == 0, "config.json: hidden_size (",
           hidden_size, ") must be divisible by num_attention_heads (", num_attention_heads, ")");
  MM_CHECK(explicit_head_dim >= 0, "config.json: head_dim must be positive, got ", explicit_head_dim);
  MM_CHECK(num_attention_heads % num_key_value_heads == 0, "config.json: num_attention_heads (",
           num_attention_heads, ") must be divisible by num_key_value_heads (", num_key_value_heads, ")");
  MM_CHECK(partial_rotary_factor > 0 && partial_rotary_factor <= 1, "config.json: partial_rotary_factor (",
           partial_rotary_factor, ") must be in (0, 1]");
  MM_CHECK(rotary_dim() > 0 && rotary_dim() % 2 == 0, "config.json: the rotary dims (head_dim ", head_dim(),
           " x partial_rotary_factor ", partial_rotary_factor, " = ", rotary_dim(), ") must be even and positive");
  // Text-only decoders (Qwen3) have 1D rotary; the Qwen-VL readers always fill mrope_section.
  if (!mrope_section.empty()) {
    MM_CHECK(mrope_section.size() == 3, "config.json: rope_scaling.mrope_section must have 3 entries, got ",
             mrope_section.size());
    const int64_t sum = std::accumulate(mrope_section.begin(), mrope_section.end(), int64_t{0});
    MM_CHECK(sum == rotary_dim() / 2, "config.json: rope_scaling.mrope_section sums to ", sum,
             " but must equal the rotary dims / 2 = ", rotary_dim() / 2);
  }
  if (!layer_types.empty()) {
    MM_CHECK(static_cast<int64_t>(layer_types.size()) == num_hidden_layers, "config.json: layer_types has ",
             layer_types.size(), " entries for num_hidden_layers ", num_hidden_layers);
    for (size_t i = 0; i < layer_types.size(); ++i)
      MM_CHECK(layer_types[i] == "full_attention" || layer_types[i] == "linear_attention", "config.json: layer_types[",
               i, "] '", layer_types[i], "' is not supported (full_attention, linear_attention)");
    require_positive("config.json: ", {{"linear_num_key_heads", linear.num_key_heads},
                                       {"linear_num_value_heads", linear.num_value_heads},
                                       {"linear_key_head_dim", linear.key_head_dim},
                                       {"linear_value_head_dim", linear.value_head_dim},
                                       {"linear_conv_kernel_dim", linear.conv_kernel}});
    MM_CHECK(linear.num_value_heads % linear.num_key_heads == 0, "config.json: linear_num_value_heads (",
             linear.num_value_heads, ") must be a multiple of linear_num_key_heads (", linear.num_key_heads, ")");
  }
  MM_CHECK(pad_token_id < vocab_size, "config.json: pad_token_id (", pad_token_id, ") must be below vocab_size (",
           vocab_size, ")");
  MM_CHECK(hidden_act == "silu", "config.json: hidden_act '", hidden_act, "' is not supported (silu)");
  if (moe.num_experts > 0) {
    require_positive("config.json: ", {{"num_experts_per_tok", moe.num_experts_per_tok},
                                       {"moe_intermediate_size", moe.moe_intermediate_size},
                                       {"decoder_sparse_step", moe.decoder_sparse_step}});
    MM_CHECK(moe.num_experts_per_tok <= moe.num_experts, "config.json: num_experts_per_tok (",
             moe.num_experts_per_tok, ") must not exceed num_experts (", moe.num_experts, ")");
  }
  // Positive and consistent; now bounded: the decoder they describe must fit in memory.
  const double h = static_cast<double>(hidden_size), kv = static_cast<double>(num_key_value_heads * head_dim());
  const double q = static_cast<double>(num_attention_heads * head_dim());
  const double attention = (attention_output_gate ? 3 : 2) * h * q + 2 * h * kv;
  const double key = static_cast<double>(linear.num_key_heads * linear.key_head_dim);
  const double value = static_cast<double>(linear.num_value_heads * linear.value_head_dim);
  // in_proj_qkv, in_proj_z, out_proj (in_proj_a/b and the conv are small beside them)
  const double linear_attention = h * (2 * key + value) + 2 * h * value;
  const double dense = 3 * h * static_cast<double>(intermediate_size);
  const double sparse = static_cast<double>(moe.num_experts) * 3 * h * static_cast<double>(moe.moe_intermediate_size) +
                        3 * h * static_cast<double>(moe.shared_expert_intermediate_size);
  double layers = 0;
  for (int64_t i = 0; i < num_hidden_layers; ++i)
    layers += (is_linear_attention_layer(i) ? linear_attention : attention) + (moe.is_sparse_layer(i) ? sparse : dense);
  check_model_fits_in_memory(
      "config.json",
      {{str_cat("text_config.num_hidden_layers (", num_hidden_layers, ") x a decoder layer of hidden_size ",
                hidden_size, " and intermediate_size ", intermediate_size,
                moe.num_experts > 0 ? str_cat(" (", moe.num_experts, " experts of ", moe.moe_intermediate_size, ")") : ""),
        layers},
       {str_cat("text_config.vocab_size (", vocab_size, ") x hidden_size (", hidden_size, ")"),
        static_cast<double>(vocab_size) * h * (tie_word_embeddings ? 1 : 2)}});
}

bool Qwen2TextConfig::is_linear_attention_layer(int64_t layer) const {
  return !layer_types.empty() && layer_types.at(static_cast<size_t>(layer)) == "linear_attention";
}

Qwen2TextConfig Qwen2TextConfig::multi_token_prediction_layers() const {
  Qwen2TextConfig out = *this;
  out.num_hidden_layers = mtp_num_hidden_layers;
  out.layer_types.assign(static_cast<size_t>(mtp_num_hidden_layers), "full_attention");
  out.moe.decoder_sparse_step = 1;
  out.moe.mlp_only_layers.clear();
  out.mtp_num_hidden_layers = 0;
  return out;
}

void Qwen2TextConfig::read_qwen3_5_fields(const JsonView& t) {
  explicit_head_dim = t.get_or<int64_t>("head_dim", 256);
  qk_norm = true;
  attention_output_gate = true;
  zero_centered_norms = true;
  attention_bias = t.get_or<bool>("attention_bias", false);
  o_proj_bias = attention_bias;
  pad_token_id = t.get_or<int64_t>("pad_token_id", -1);
  linear.num_key_heads = t.get_or<int64_t>("linear_num_key_heads", linear.num_key_heads);
  linear.num_value_heads = t.get_or<int64_t>("linear_num_value_heads", linear.num_value_heads);
  linear.key_head_dim = t.get_or<int64_t>("linear_key_head_dim", linear.key_head_dim);
  linear.value_head_dim = t.get_or<int64_t>("linear_value_head_dim", linear.value_head_dim);
  linear.conv_kernel = t.get_or<int64_t>("linear_conv_kernel_dim", linear.conv_kernel);
  if (t.has("layer_types")) {
    layer_types = t.get<std::vector<std::string>>("layer_types");
    // transformers' remap_legacy_layer_types
    for (auto& type : layer_types) {
      if (type == "attention") type = "full_attention";
      if (type == "mamba" || type == "conv") type = "linear_attention";
    }
  } else {
    // Qwen3_5TextConfig without layer_types: every full_attention_interval-th layer attends fully.
    const int64_t interval = t.get_or<int64_t>("full_attention_interval", 4);
    MM_CHECK(interval > 0, t.where("full_attention_interval"), ": must be positive, got ", interval);
    for (int64_t i = 0; i < num_hidden_layers; ++i)
      layer_types.push_back((i + 1) % interval == 0 ? "full_attention" : "linear_attention");
  }
  // transformers keeps it inside rope_parameters; older files at the top level; 0.25 by default.
  const char* rope_key = t.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  const double top = t.get_or<double>("partial_rotary_factor", 0.25);
  partial_rotary_factor = t.has(rope_key) ? t.child(rope_key).get_or<double>("partial_rotary_factor", top) : top;
  mtp_num_hidden_layers = t.get_or<int64_t>("mtp_num_hidden_layers", 0);
  MM_CHECK(mtp_num_hidden_layers >= 0 && mtp_num_hidden_layers <= 16, t.where("mtp_num_hidden_layers"),
           ": must be within 0..16, got ", mtp_num_hidden_layers);
  mtp_use_dedicated_embeddings = t.get_or<bool>("mtp_use_dedicated_embeddings", false);
}

bool DecoderMoEConfig::is_sparse_layer(int64_t layer) const {
  return num_experts > 0 && (layer + 1) % decoder_sparse_step == 0 &&
         std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) == mlp_only_layers.end();
}

void Qwen2TextConfig::read_common_fields(const JsonView& t) {
  vocab_size = t.get<int64_t>("vocab_size");
  hidden_size = t.get<int64_t>("hidden_size");
  intermediate_size = t.get<int64_t>("intermediate_size");
  num_hidden_layers = t.get<int64_t>("num_hidden_layers");
  num_attention_heads = t.get<int64_t>("num_attention_heads");
  num_key_value_heads = t.get_or<int64_t>("num_key_value_heads", num_attention_heads);
  hidden_act = t.get_or<std::string>("hidden_act", hidden_act);
  max_position_embeddings = t.get_or<int64_t>("max_position_embeddings", max_position_embeddings);
  rms_norm_eps = t.get_or<double>("rms_norm_eps", rms_norm_eps);
  initializer_range = t.get_or<double>("initializer_range", initializer_range);
}

Qwen2TextConfig Qwen2TextConfig::from_json(const JsonView& root) {
  // Published checkpoints keep the text fields at the top level; transformers 5 nests them.
  const JsonView t = root.has("text_config") ? root.child("text_config") : root;
  Qwen2TextConfig tc;
  tc.read_common_fields(t);
  const char* rope_key = t.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  const JsonView rope = t.child(rope_key);
  tc.rope_theta = rope.get_or<double>("rope_theta", t.get_or<double>("rope_theta", tc.rope_theta));
  tc.mrope_section = rope.get<std::vector<int64_t>>("mrope_section");
  tc.tie_word_embeddings = root.get_or<bool>("tie_word_embeddings", t.get_or<bool>("tie_word_embeddings", false));
  return tc;
}

nlohmann::json Qwen2TextConfig::to_json(const std::string& model_type) const {
  nlohmann::json rope = {{"rope_type", "default"}, {"rope_theta", rope_theta}, {"mrope_section", mrope_section}};
  if (mrope_interleaved) rope["mrope_interleaved"] = true;
  nlohmann::json out = {{"model_type", model_type},
          {"vocab_size", vocab_size},
          {"hidden_size", hidden_size},
          {"intermediate_size", intermediate_size},
          {"num_hidden_layers", num_hidden_layers},
          {"num_attention_heads", num_attention_heads},
          {"num_key_value_heads", num_key_value_heads},
          {"hidden_act", hidden_act},
          {"max_position_embeddings", max_position_embeddings},
          {"rms_norm_eps", rms_norm_eps},
          {"initializer_range", initializer_range},
          {"rope_parameters", rope},
          {"tie_word_embeddings", tie_word_embeddings}};
  // The Qwen3 options, written only when they differ from Qwen2's (whose configs never had them).
  if (explicit_head_dim > 0) out["head_dim"] = explicit_head_dim;
  if (qk_norm) out["attention_bias"] = attention_bias;
  if (pad_token_id >= 0) out["pad_token_id"] = pad_token_id;
  if (!layer_types.empty()) {  // Qwen3.5's hybrid decoder
    out["layer_types"] = layer_types;
    out["linear_num_key_heads"] = linear.num_key_heads;
    out["linear_num_value_heads"] = linear.num_value_heads;
    out["linear_key_head_dim"] = linear.key_head_dim;
    out["linear_value_head_dim"] = linear.value_head_dim;
    out["linear_conv_kernel_dim"] = linear.conv_kernel;
    out["mtp_num_hidden_layers"] = mtp_num_hidden_layers;
    out["mtp_use_dedicated_embeddings"] = mtp_use_dedicated_embeddings;
    out["rope_parameters"]["partial_rotary_factor"] = partial_rotary_factor;
  }
  if (moe.num_experts > 0) {
    out["num_experts"] = moe.num_experts;
    out["num_experts_per_tok"] = moe.num_experts_per_tok;
    out["moe_intermediate_size"] = moe.moe_intermediate_size;
    out["decoder_sparse_step"] = moe.decoder_sparse_step;
    out["mlp_only_layers"] = moe.mlp_only_layers;
    out["router_aux_loss_coef"] = moe.router_aux_loss_coef;
    if (moe.shared_expert_intermediate_size > 0) out["shared_expert_intermediate_size"] = moe.shared_expert_intermediate_size;
  }
  return out;
}

}  // namespace mm
