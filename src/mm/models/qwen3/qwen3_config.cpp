#include "mm/models/qwen3/qwen3_config.h"

#include "mm/core/error.h"
#include "mm/core/json_config.h"

namespace mm {

Qwen3Config Qwen3Config::from_file(const std::filesystem::path& config_json) {
  const auto json = read_json_file(config_json);
  const JsonView t(json, config_json.string());
  Qwen3Config c;
  c.model_type = t.get<std::string>("model_type");
  MM_CHECK(c.model_type == "qwen3" || c.model_type == "qwen3_moe" || c.model_type == "qwen3_5_text",
           t.where("model_type"), ": '", c.model_type,
           "' is not a Qwen3 language model (qwen3, qwen3_moe, qwen3_5_text)");
  const bool moe = c.model_type == "qwen3_moe";
  auto& tc = c.text;
  tc.read_common_fields(t);
  if (c.model_type == "qwen3_5_text") {
    // Qwen3.5's rotary takes three position rows (M-RoPE); text alone gives all three the same
    // position, which is plain 1D rotary whatever the mrope_section.
    tc.read_qwen3_5_fields(t);
  } else {
    // Qwen3Config's own default is 128; Qwen3MoeConfig has none, so its attention falls back to
    // hidden_size / num_attention_heads.
    tc.explicit_head_dim = t.get_or<int64_t>("head_dim", moe ? 0 : 128);
    tc.qk_norm = true;
    tc.attention_bias = t.get_or<bool>("attention_bias", false);
    tc.o_proj_bias = tc.attention_bias;
    tc.pad_token_id = t.get_or<int64_t>("pad_token_id", -1);
  }
  tc.tie_word_embeddings = t.get_or<bool>("tie_word_embeddings", false);
  tc.mrope_section.clear();
  // transformers 5 writes rope_parameters; the published checkpoints a top-level rope_theta and
  // rope_scaling null.
  const char* rope_key = t.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  const JsonView rope = t.child(rope_key);
  const auto rope_type = rope.get_or<std::string>("rope_type", rope.get_or<std::string>("type", "default"));
  MM_CHECK(rope_type == "default", t.where(rope_key), ".rope_type: '", rope_type, "' is not supported (default)");
  tc.rope_theta = rope.get_or<double>("rope_theta", t.get_or<double>("rope_theta", tc.rope_theta));
  MM_CHECK(!t.get_or<bool>("use_sliding_window", false), t.where("use_sliding_window"),
           ": sliding-window attention is not supported");
  if (moe) {
    // The hub's configs say num_experts; transformers 5.17's save_pretrained num_local_experts.
    const char* experts_key = t.has("num_experts") ? "num_experts" : "num_local_experts";
    tc.moe.num_experts = t.get<int64_t>(experts_key);
    tc.moe.num_experts_per_tok = t.get<int64_t>("num_experts_per_tok");
    tc.moe.moe_intermediate_size = t.get<int64_t>("moe_intermediate_size");
    tc.moe.norm_topk_prob = t.get_or<bool>("norm_topk_prob", false);
    tc.moe.decoder_sparse_step = t.get_or<int64_t>("decoder_sparse_step", 1);
    tc.moe.mlp_only_layers = t.get_or<std::vector<int64_t>>("mlp_only_layers", {});
    tc.moe.router_aux_loss_coef = t.get_or<double>("router_aux_loss_coef", 0.001);
    // The other MoE sizes are checked by validate(), which skips them without experts.
    MM_CHECK(tc.moe.num_experts > 0, t.where(experts_key), ": must be positive, got ", tc.moe.num_experts);
    c.output_router_logits = t.get_or<bool>("output_router_logits", false);
  }
  tc.validate();
  return c;
}

}  // namespace mm
