#include "mm/models/qwen2_5_vl/qwen2_5_vl_config.h"

#include <numeric>

#include "mm/core/error.h"
#include "mm/core/memory_bounds.h"
#include "mm/nn/gated_mlp.h"

namespace mm {
namespace {

void check_positive(int64_t value, const char* section, const char* field) {
  MM_CHECK(value > 0, "config.json: ", section, field, " must be positive, got ", value);
}

std::vector<int64_t> ids_from(const nlohmann::json& j) {
  if (j.is_number_integer()) return {j.get<int64_t>()};
  if (j.is_array()) return j.get<std::vector<int64_t>>();
  return {};
}

}  // namespace

void Qwen2_5_VLVisionConfig::validate() const {
  const char* s = "vision_config.";
  check_positive(depth, s, "depth");
  check_positive(hidden_size, s, "hidden_size");
  check_positive(num_heads, s, "num_heads");
  check_positive(patch_size, s, "patch_size");
  check_positive(spatial_merge_size, s, "spatial_merge_size");
  check_positive(temporal_patch_size, s, "temporal_patch_size");
  MM_CHECK(hidden_size % num_heads == 0, "config.json: vision_config.hidden_size (", hidden_size,
           ") must be divisible by num_heads (", num_heads, ")");
  MM_CHECK((hidden_size / num_heads) % 4 == 0, "config.json: vision_config head dim ",
           hidden_size / num_heads, " must be divisible by 4 for 2D rotary embeddings");
  check_positive(window_size, s, "window_size");
  MM_CHECK(rope_theta > 0, "config.json: vision_config.rope_parameters.rope_theta must be positive");
  MM_CHECK(window_size % (patch_size * spatial_merge_size) == 0, "config.json: vision_config.window_size (",
           window_size, ") must be a multiple of patch_size * spatial_merge_size");
  for (int64_t i : fullatt_block_indexes)
    MM_CHECK(i >= 0 && i < depth, "config.json: vision_config.fullatt_block_indexes has ", i,
             ", outside [0, depth=", depth, ")");
  MM_CHECK(is_supported_activation(hidden_act), "config.json: vision_config.hidden_act '", hidden_act,
           "' is not supported");
}

void Qwen2TextConfig::validate() const {
  const char* s = "text_config.";
  check_positive(vocab_size, s, "vocab_size");
  check_positive(hidden_size, s, "hidden_size");
  check_positive(num_hidden_layers, s, "num_hidden_layers");
  check_positive(num_attention_heads, s, "num_attention_heads");
  check_positive(num_key_value_heads, s, "num_key_value_heads");
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
}

void Qwen2_5_VLConfig::validate() const {
  vision.validate();
  text.validate();
  // Sizes are positive and consistent; now bounded: the model they describe must fit in memory.
  const double h = static_cast<double>(text.hidden_size), kv = static_cast<double>(text.num_key_value_heads * text.head_dim());
  const double layer = 2 * h * h + 2 * h * kv + 3 * h * static_cast<double>(text.intermediate_size);
  const double hv = static_cast<double>(vision.hidden_size), merged = hv * static_cast<double>(vision.spatial_merge_size * vision.spatial_merge_size);
  const double block = 4 * hv * hv + 3 * hv * static_cast<double>(vision.intermediate_size);
  check_model_fits_in_memory(
      "config.json",
      {{str_cat("text_config.num_hidden_layers (", text.num_hidden_layers, ") x a decoder layer of hidden_size ",
                text.hidden_size, " and intermediate_size ", text.intermediate_size),
        static_cast<double>(text.num_hidden_layers) * layer},
       {str_cat("text_config.vocab_size (", text.vocab_size, ") x hidden_size (", text.hidden_size, ")"),
        static_cast<double>(text.vocab_size) * h * (text.tie_word_embeddings ? 1 : 2)},
       {str_cat("vision_config.depth (", vision.depth, ") x a ViT block of hidden_size ", vision.hidden_size,
                " and intermediate_size ", vision.intermediate_size),
        static_cast<double>(vision.depth) * block},
       {str_cat("vision_config merger of hidden_size ", vision.hidden_size, " to out_hidden_size ", vision.out_hidden_size),
        merged * merged + merged * static_cast<double>(vision.out_hidden_size)}});
}

Qwen2_5_VLConfig Qwen2_5_VLConfig::from_json(const nlohmann::json& json, const std::string& file) {
  JsonView root(json, file);
  const auto model_type = root.get<std::string>("model_type");
  MM_CHECK(model_type == "qwen2_5_vl", file, ": model_type is '", model_type, "', expected 'qwen2_5_vl'");
  Qwen2_5_VLConfig c;

  const JsonView v = root.child("vision_config");
  auto& vc = c.vision;
  vc.depth = v.get<int64_t>("depth");
  vc.hidden_size = v.get<int64_t>("hidden_size");
  vc.hidden_act = v.get_or<std::string>("hidden_act", vc.hidden_act);
  vc.intermediate_size = v.get<int64_t>("intermediate_size");
  vc.num_heads = v.get<int64_t>("num_heads");
  vc.in_channels = v.get_or<int64_t>("in_channels", v.get_or<int64_t>("in_chans", vc.in_channels));
  vc.patch_size = v.get_or<int64_t>("patch_size", vc.patch_size);
  vc.spatial_merge_size = v.get_or<int64_t>("spatial_merge_size", vc.spatial_merge_size);
  vc.temporal_patch_size = v.get_or<int64_t>("temporal_patch_size", vc.temporal_patch_size);
  vc.tokens_per_second = v.get_or<int64_t>("tokens_per_second", vc.tokens_per_second);
  vc.window_size = v.get_or<int64_t>("window_size", vc.window_size);
  vc.out_hidden_size = v.get<int64_t>("out_hidden_size");
  vc.fullatt_block_indexes = v.get_or<std::vector<int64_t>>("fullatt_block_indexes", vc.fullatt_block_indexes);
  vc.rope_theta = v.child("rope_parameters").get_or<double>("rope_theta", vc.rope_theta);
  vc.initializer_range = v.get_or<double>("initializer_range", vc.initializer_range);

  // Published checkpoints keep the text fields at the top level; transformers 5 nests them.
  const JsonView t = root.has("text_config") ? root.child("text_config") : root;
  auto& tc = c.text;
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
  tc.tie_word_embeddings =
      root.get_or<bool>("tie_word_embeddings", t.get_or<bool>("tie_word_embeddings", false));

  c.image_token_id = root.get_or<int64_t>("image_token_id", c.image_token_id);
  c.video_token_id = root.get_or<int64_t>("video_token_id", c.video_token_id);
  c.vision_start_token_id = root.get_or<int64_t>("vision_start_token_id", c.vision_start_token_id);
  c.vision_end_token_id = root.get_or<int64_t>("vision_end_token_id", c.vision_end_token_id);
  if (t.has("eos_token_id")) c.eos_token_ids = ids_from(t.raw()["eos_token_id"]);
  else if (root.has("eos_token_id")) c.eos_token_ids = ids_from(root.raw()["eos_token_id"]);
  c.validate();
  return c;
}

Qwen2_5_VLConfig Qwen2_5_VLConfig::from_file(const std::filesystem::path& config_json) {
  return from_json(read_json_file(config_json), config_json.string());
}

nlohmann::json Qwen2_5_VLConfig::to_json() const {
  nlohmann::json vision_json = {
      {"model_type", "qwen2_5_vl"}, {"depth", vision.depth}, {"hidden_size", vision.hidden_size},
      {"hidden_act", vision.hidden_act}, {"intermediate_size", vision.intermediate_size},
      {"num_heads", vision.num_heads}, {"in_channels", vision.in_channels},
      {"patch_size", vision.patch_size}, {"spatial_merge_size", vision.spatial_merge_size},
      {"temporal_patch_size", vision.temporal_patch_size},
      {"tokens_per_second", vision.tokens_per_second}, {"window_size", vision.window_size},
      {"out_hidden_size", vision.out_hidden_size}, {"initializer_range", vision.initializer_range},
      {"fullatt_block_indexes", vision.fullatt_block_indexes},
      {"rope_parameters", {{"rope_type", "axial"}, {"rope_theta", vision.rope_theta}}}};
  nlohmann::json text_json = {
      {"model_type", "qwen2_5_vl_text"}, {"vocab_size", text.vocab_size},
      {"hidden_size", text.hidden_size}, {"intermediate_size", text.intermediate_size},
      {"num_hidden_layers", text.num_hidden_layers},
      {"num_attention_heads", text.num_attention_heads},
      {"num_key_value_heads", text.num_key_value_heads}, {"hidden_act", text.hidden_act},
      {"max_position_embeddings", text.max_position_embeddings},
      {"rms_norm_eps", text.rms_norm_eps}, {"initializer_range", text.initializer_range},
      {"rope_parameters",
       {{"rope_type", "default"}, {"rope_theta", text.rope_theta}, {"mrope_section", text.mrope_section}}},
      {"tie_word_embeddings", text.tie_word_embeddings}};
  if (!eos_token_ids.empty()) text_json["eos_token_id"] = eos_token_ids;
  return {{"model_type", "qwen2_5_vl"},
          {"architectures", {"Qwen2_5_VLForConditionalGeneration"}},
          {"vision_config", vision_json},
          {"text_config", text_json},
          {"image_token_id", image_token_id},
          {"video_token_id", video_token_id},
          {"vision_start_token_id", vision_start_token_id},
          {"vision_end_token_id", vision_end_token_id},
          {"tie_word_embeddings", text.tie_word_embeddings}};
}

}  // namespace mm
