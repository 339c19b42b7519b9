#include "mm/models/clip/clip_vision_config.h"

#include <nlohmann/json.hpp>

#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/core/memory_bounds.h"

namespace mm {

void CLIPVisionConfig::validate(const std::string& where) const {
  auto positive = [&](const char* key, int64_t value) {
    MM_CHECK(value > 0, where, key, "=", value, " must be positive");
  };
  positive("hidden_size", hidden_size);
  positive("intermediate_size", intermediate_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("num_channels", num_channels);
  positive("image_size", image_size);
  positive("patch_size", patch_size);
  MM_CHECK(hidden_size % num_attention_heads == 0, where, "num_attention_heads=", num_attention_heads,
           " does not divide hidden_size=", hidden_size);
  MM_CHECK(patch_size <= image_size, where, "patch_size=", patch_size, " exceeds image_size=", image_size);
  MM_CHECK(hidden_act == "quick_gelu" || hidden_act == "gelu", where, "hidden_act='", hidden_act,
           "' is not supported (quick_gelu, gelu)");
  MM_CHECK(layer_norm_eps > 0, where, "layer_norm_eps=", layer_norm_eps, " must be positive");
  MM_CHECK(attention_dropout >= 0 && attention_dropout < 1, where, "attention_dropout=", attention_dropout,
           " must be in [0, 1)");
  const double h = static_cast<double>(hidden_size);
  check_model_fits_in_memory(
      where, {{str_cat("num_hidden_layers (", num_hidden_layers, ") x a layer of hidden_size ", hidden_size,
                       " and intermediate_size ", intermediate_size),
               static_cast<double>(num_hidden_layers) * (4 * h * h + 2 * h * static_cast<double>(intermediate_size))},
              {str_cat("the position embeddings of image_size ", image_size, " / patch_size ", patch_size),
               static_cast<double>(num_positions()) * h}});
}

CLIPVisionConfig CLIPVisionConfig::parse(const nlohmann::json& json, const std::string& file) {
  MM_CHECK(json.is_object(), file, ": expected a JSON object");
  const JsonView root(json, file);
  const auto type = root.get_or<std::string>("model_type", "clip_vision_model");
  MM_CHECK(type == "clip_vision_model" || type == "clip", root.where("model_type"), ": '", type,
           "' is not a CLIP vision tower (supported: clip_vision_model, clip with a vision_config)");
  const JsonView v = type == "clip" ? root.child("vision_config") : root;
  CLIPVisionConfig c;
  c.hidden_size = v.get_or("hidden_size", c.hidden_size);
  c.intermediate_size = v.get_or("intermediate_size", c.intermediate_size);
  c.num_hidden_layers = v.get_or("num_hidden_layers", c.num_hidden_layers);
  c.num_attention_heads = v.get_or("num_attention_heads", c.num_attention_heads);
  c.num_channels = v.get_or("num_channels", c.num_channels);
  c.image_size = v.get_or("image_size", c.image_size);
  c.patch_size = v.get_or("patch_size", c.patch_size);
  c.hidden_act = v.get_or("hidden_act", c.hidden_act);
  c.layer_norm_eps = v.get_or("layer_norm_eps", c.layer_norm_eps);
  c.attention_dropout = v.get_or("attention_dropout", c.attention_dropout);
  c.validate(v.where(""));
  return c;
}

CLIPVisionConfig CLIPVisionConfig::from_file(const std::filesystem::path& config_json) {
  return parse(read_json_file(config_json), config_json.string());
}

}  // namespace mm
