#include "mm/models/qwen2/qwen2_text_config.h"

#include <nlohmann/json.hpp>

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
  MM_CHECK(hidden_size % num_attention_heads == 0, "config.json: hidden_size (", hidden_size,
           ") must be divisible by num_attention_heads (", num_attention_heads, ")");
  MM_CHECK(num_attention_heads % num_key_value_heads == 0, "config.json: num_attention_heads (",
           num_attention_heads, ") must be divisible by num_key_value_heads (", num_key_value_heads, ")");
  MM_CHECK(head_dim() % 2 == 0, "config.json: head dim ", head_dim(), " must be even");
  MM_CHECK(mrope_section.size() == 3, "config.json: rope_scaling.mrope_section must have 3 entries, got ",
           mrope_section.size());
  const int64_t sum = std::accumulate(mrope_section.begin(), mrope_section.end(), int64_t{0});
  MM_CHECK(sum == head_dim() / 2, "config.json: rope_scaling.mrope_section sums to ", sum,
           " but must equal head_dim / 2 = ", head_dim() / 2);
  MM_CHECK(hidden_act == "silu", "config.json: hidden_act '", hidden_act, "' is not supported (silu)");
  // Positive and consistent; now bounded: the decoder they describe must fit in memory.
  const double h = static_cast<double>(hidden_size), kv = static_cast<double>(num_key_value_heads * head_dim());
  const double layer = 2 * h * h + 2 * h * kv + 3 * h * static_cast<double>(intermediate_size);
  check_model_fits_in_memory(
      "config.json",
      {{str_cat("text_config.num_hidden_layers (", num_hidden_layers, ") x a decoder layer of hidden_size ",
                hidden_size, " and intermediate_size ", intermediate_size),
        static_cast<double>(num_hidden_layers) * layer},
       {str_cat("text_config.vocab_size (", vocab_size, ") x hidden_size (", hidden_size, ")"),
        static_cast<double>(vocab_size) * h * (tie_word_embeddings ? 1 : 2)}});
}

Qwen2TextConfig Qwen2TextConfig::from_json(const JsonView& root) {
  // Published checkpoints keep the text fields at the top level; transformers 5 nests them.
  const JsonView t = root.has("text_config") ? root.child("text_config") : root;
  Qwen2TextConfig tc;
  tc.vocab_size = t.get<int64_t>("vocab_size");
  tc.hidden_size = t.get<int64_t>("hidden_size");
  tc.intermediate_size = t.get<int64_t>("intermediate_size");
  tc.num_hidden_layers = t.get<int64_t>("num_hidden_layers");
  tc.num_attention_heads = t.get<int64_t>("num_attention_heads");
  tc.num_key_value_heads = t.get_or<int64_t>("num_key_value_heads", tc.num_attention_heads);
  tc.hidden_act = t.get_or<std::string>("hidden_act", tc.hidden_act);
  tc.max_position_embeddings = t.get_or<int64_t>("max_position_embeddings", tc.max_position_embeddings);
  tc.rms_norm_eps = t.get_or<double>("rms_norm_eps", tc.rms_norm_eps);
  tc.initializer_range = t.get_or<double>("initializer_range", tc.initializer_range);
  const char* rope_key = t.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  const JsonView rope = t.child(rope_key);
  tc.rope_theta = rope.get_or<double>("rope_theta", t.get_or<double>("rope_theta", tc.rope_theta));
  tc.mrope_section = rope.get<std::vector<int64_t>>("mrope_section");
  tc.tie_word_embeddings = root.get_or<bool>("tie_word_embeddings", t.get_or<bool>("tie_word_embeddings", false));
  return tc;
}

nlohmann::json Qwen2TextConfig::to_json(const std::string& model_type) const {
  return {{"model_type", model_type},
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
          {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", rope_theta}, {"mrope_section", mrope_section}}},
          {"tie_word_embeddings", tie_word_embeddings}};
}

}  // namespace mm
