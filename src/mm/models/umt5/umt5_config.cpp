#include "mm/models/umt5/umt5_config.h"

#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/core/memory_bounds.h"

namespace mm {

std::string UMT5Config::activation() const {
  const std::string act = gated() ? feed_forward_proj.substr(6) : feed_forward_proj;
  // transformers maps "gated-gelu" to gelu_new, the tanh approximation.
  if (act == "gelu" && gated()) return "gelu_tanh";
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") return "gelu_tanh";
  return act;
}

void UMT5Config::validate() const {
  MM_CHECK(vocab_size > 0 && d_model > 0 && d_kv > 0 && d_ff > 0 && num_layers > 0 && num_heads > 0,
           "umT5 config: vocab_size, d_model, d_kv, d_ff, num_layers and num_heads must be positive");
  MM_CHECK(relative_attention_num_buckets >= 4, "umT5 config: relative_attention_num_buckets=",
           relative_attention_num_buckets, " must be at least 4");
  MM_CHECK(relative_attention_max_distance > relative_attention_num_buckets / 4,
           "umT5 config: relative_attention_max_distance=", relative_attention_max_distance,
           " must exceed relative_attention_num_buckets / 4");
  const std::string act = activation();
  MM_CHECK(act == "gelu_tanh" || act == "relu" || act == "gelu", "umT5 config: feed_forward_proj='",
           feed_forward_proj, "' is not one of gated-gelu, gelu, relu, gated-relu");
  const double d = static_cast<double>(d_model), inner = static_cast<double>(num_heads * d_kv);
  check_model_fits_in_memory(
      "umT5 config", {{str_cat("num_layers (", num_layers, ") x a layer of d_model ", d_model, ", d_ff ", d_ff,
                               " and num_heads * d_kv ", num_heads * d_kv),
                       static_cast<double>(num_layers) * (4 * d * inner + 3 * d * static_cast<double>(d_ff))},
                      {str_cat("vocab_size (", vocab_size, ") x d_model (", d_model, ")"), static_cast<double>(vocab_size) * d}});
}

UMT5Config UMT5Config::from_file(const std::filesystem::path& config_json) {
  const auto json = read_json_file(config_json);
  const JsonView root(json, config_json.string());
  const auto type = root.get_or<std::string>("model_type", "umt5");
  MM_CHECK(type == "umt5", root.where("model_type"), ": '", type, "' is not a umT5 text encoder (supported: umt5)");
  UMT5Config c;
  c.vocab_size = root.get_or("vocab_size", c.vocab_size);
  c.d_model = root.get_or("d_model", c.d_model);
  c.d_kv = root.get_or("d_kv", c.d_kv);
  c.d_ff = root.get_or("d_ff", c.d_ff);
  c.num_layers = root.get_or("num_layers", c.num_layers);
  c.num_heads = root.get_or("num_heads", c.num_heads);
  c.relative_attention_num_buckets = root.get_or("relative_attention_num_buckets", c.relative_attention_num_buckets);
  c.relative_attention_max_distance =
      root.get_or("relative_attention_max_distance", c.relative_attention_max_distance);
  c.layer_norm_epsilon = root.get_or("layer_norm_epsilon", c.layer_norm_epsilon);
  c.feed_forward_proj = root.get_or("feed_forward_proj", c.feed_forward_proj);
  c.validate();
  return c;
}

}  // namespace mm
