#include "mm/models/wan/wan_transformer_config.h"

#include <nlohmann/json.hpp>
#include <vector>

#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/core/memory_bounds.h"

namespace mm {

void WanTransformerConfig::validate() const {
  const char* where = "Wan transformer config: ";
  for (size_t i = 0; i < patch_size.size(); ++i)
    MM_CHECK(patch_size[i] > 0, where, "patch_size[", i, "]=", patch_size[i], " must be positive");
  MM_CHECK(num_attention_heads > 0, where, "num_attention_heads=", num_attention_heads, " must be positive");
  // The rotary embedding rotates pairs of channels, split over frames/height/width.
  MM_CHECK(attention_head_dim > 0 && attention_head_dim % 2 == 0, where, "attention_head_dim=", attention_head_dim,
           " must be positive and even");
  MM_CHECK(in_channels > 0, where, "in_channels=", in_channels, " must be positive");
  MM_CHECK(out_channels > 0, where, "out_channels=", out_channels, " must be positive");
  MM_CHECK(text_dim > 0, where, "text_dim=", text_dim, " must be positive");
  MM_CHECK(freq_dim > 0, where, "freq_dim=", freq_dim, " must be positive");
  MM_CHECK(ffn_dim > 0, where, "ffn_dim=", ffn_dim, " must be positive");
  MM_CHECK(num_layers > 0, where, "num_layers=", num_layers, " must be positive");
  MM_CHECK(qk_norm == "rms_norm_across_heads", where, "qk_norm='", qk_norm,
           "' is not supported (supported: rms_norm_across_heads)");
  MM_CHECK(eps > 0, where, "eps=", eps, " must be positive");
  MM_CHECK(rope_max_seq_len > 0, where, "rope_max_seq_len=", rope_max_seq_len, " must be positive");
  MM_CHECK(!image_dim || *image_dim > 0, where, "image_dim=", image_dim.value_or(0), " must be positive");
  MM_CHECK(image_dim.has_value() == added_kv_proj_dim.has_value(), where,
           image_dim ? "added_kv_proj_dim is missing: image_dim needs the added key/value projections"
                     : "added_kv_proj_dim is set without image_dim");
  MM_CHECK(!added_kv_proj_dim || *added_kv_proj_dim == inner_dim(), where, "added_kv_proj_dim=",
           added_kv_proj_dim.value_or(0), " must equal num_attention_heads * attention_head_dim = ", inner_dim(),
           " (it projects the embedded image tokens)");
  MM_CHECK(!pos_embed_seq_len || image_dim, where, "pos_embed_seq_len is set without image_dim");
  MM_CHECK(!pos_embed_seq_len || (*pos_embed_seq_len > 0 && *pos_embed_seq_len % 2 == 0), where,
           "pos_embed_seq_len=", pos_embed_seq_len.value_or(0),
           " must be positive and even (first + last frame image tokens)");
  // Bounded as well as positive: the model these sizes describe must fit in memory.
  const double dim = static_cast<double>(inner_dim());
  const double block = 8 * dim * dim + 2 * dim * static_cast<double>(ffn_dim);  // self + cross attention, FFN
  check_model_fits_in_memory(
      "Wan transformer config", {{str_cat("num_layers (", num_layers, ") x a block of num_attention_heads * ",
                                          "attention_head_dim = ", inner_dim(), " and ffn_dim ", ffn_dim),
                                  static_cast<double>(num_layers) * block},
                                 {str_cat("text_dim (", text_dim, ") x ", inner_dim()), 2 * dim * static_cast<double>(text_dim)}});
}

WanTransformerConfig WanTransformerConfig::from_json(const nlohmann::json& json, const std::string& source) {
  const JsonView root(json, source);
  const auto type = root.get_or<std::string>("_class_name", "WanTransformer3DModel");
  MM_CHECK(type == "WanTransformer3DModel", root.where("_class_name"), ": '", type,
           "' is not a Wan transformer (supported: WanTransformer3DModel)");
  WanTransformerConfig c;
  if (root.has("patch_size")) {
    const auto patch = root.get<std::vector<int64_t>>("patch_size");
    MM_CHECK(patch.size() == 3, root.where("patch_size"), ": must list 3 sizes (frames, height, width), got ",
             patch.size());
    c.patch_size = {patch[0], patch[1], patch[2]};
  }
  c.num_attention_heads = root.get_or("num_attention_heads", c.num_attention_heads);
  c.attention_head_dim = root.get_or("attention_head_dim", c.attention_head_dim);
  c.in_channels = root.get_or("in_channels", c.in_channels);
  // diffusers: out_channels = out_channels or in_channels.
  c.out_channels = root.get_or<int64_t>("out_channels", 0);
  if (c.out_channels == 0) c.out_channels = c.in_channels;
  c.text_dim = root.get_or("text_dim", c.text_dim);
  c.freq_dim = root.get_or("freq_dim", c.freq_dim);
  c.ffn_dim = root.get_or("ffn_dim", c.ffn_dim);
  c.num_layers = root.get_or("num_layers", c.num_layers);
  c.cross_attn_norm = root.get_or("cross_attn_norm", c.cross_attn_norm);
  c.qk_norm = root.get_or("qk_norm", c.qk_norm);
  c.eps = root.get_or("eps", c.eps);
  c.image_dim = root.get_optional<int64_t>("image_dim");
  c.added_kv_proj_dim = root.get_optional<int64_t>("added_kv_proj_dim");
  c.rope_max_seq_len = root.get_or("rope_max_seq_len", c.rope_max_seq_len);
  c.pos_embed_seq_len = root.get_optional<int64_t>("pos_embed_seq_len");
  c.validate();
  return c;
}

WanTransformerConfig WanTransformerConfig::from_file(const std::filesystem::path& config_json) {
  return from_json(read_json_file(config_json), config_json.string());
}

}  // namespace mm
