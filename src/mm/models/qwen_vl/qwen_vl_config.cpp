#include "mm/models/qwen_vl/qwen_vl_config.h"

#include "mm/core/error.h"

namespace mm {
namespace {

std::vector<int64_t> ids_from(const nlohmann::json& j) {
  if (j.is_number_integer()) return {j.get<int64_t>()};
  if (j.is_array()) return j.get<std::vector<int64_t>>();
  return {};
}

// Overloads for std::visit.
template <class... F>
struct overloaded : F... {
  using F::operator()...;
};

// Qwen3VLTextConfig's (or Qwen3VLMoeTextConfig's) options beyond the Qwen2 fields, with its
// defaults.
void read_qwen3_text_options(const JsonView& root, Qwen2TextConfig& text, bool moe) {
  const JsonView t = root.has("text_config") ? root.child("text_config") : root;
  // Qwen3VLTextConfig's head_dim defaults to 128; Qwen3VLMoeTextConfig's to hidden / heads.
  text.explicit_head_dim = t.get_or<int64_t>("head_dim", moe ? 0 : 128);
  if (moe) {
    // The hub's configs say num_experts; transformers 5.17's save_pretrained num_local_experts.
    text.moe.num_experts = t.get_or<int64_t>(t.has("num_experts") ? "num_experts" : "num_local_experts", 60);
    text.moe.num_experts_per_tok = t.get_or<int64_t>("num_experts_per_tok", 4);
    text.moe.moe_intermediate_size = t.get_or<int64_t>("moe_intermediate_size", 1408);
    text.moe.decoder_sparse_step = t.get_or<int64_t>("decoder_sparse_step", 1);
    text.moe.mlp_only_layers = t.get_or<std::vector<int64_t>>("mlp_only_layers", {});
    text.moe.router_aux_loss_coef = t.get_or<double>("router_aux_loss_coef", 0.001);
    // Qwen3VLMoeTextTopKRouter always renormalises the chosen probabilities.
    text.moe.norm_topk_prob = true;
    MM_CHECK(text.moe.num_experts > 0, t.where("num_experts"), ": must be positive, got ", text.moe.num_experts);
  }
  text.qk_norm = true;
  text.attention_bias = t.get_or<bool>("attention_bias", false);
  text.o_proj_bias = text.attention_bias;
  text.pad_token_id = t.get_or<int64_t>("pad_token_id", -1);
  // Qwen3VLTextRotaryEmbedding interleaves the axes whatever mrope_interleaved says.
  text.mrope_interleaved = true;
}

}  // namespace

std::string QwenVLConfig::model_type() const {
  return std::visit(overloaded{[](const Qwen2_5_VLVisionConfig&) { return "qwen2_5_vl"; },
                               [](const Qwen2VLVisionConfig&) { return "qwen2_vl"; },
                               [&](const Qwen3VLVisionConfig&) {
                                 if (!text.layer_types.empty())  // the hybrid decoder
                                   return text.moe.num_experts > 0 ? "qwen3_5_moe" : "qwen3_5";
                                 return text.moe.num_experts > 0 ? "qwen3_vl_moe" : "qwen3_vl";
                               }},
                    vision);
}

bool QwenVLConfig::video_frames_apart() const { return std::holds_alternative<Qwen3VLVisionConfig>(vision); }

int64_t QwenVLConfig::spatial_merge_size() const {
  return std::visit([](const auto& v) { return v.spatial_merge_size; }, vision);
}

int64_t QwenVLConfig::vision_depth() const {
  return std::visit([](const auto& v) { return v.depth; }, vision);
}

double QwenVLConfig::vision_initializer_range() const {
  return std::visit([](const auto& v) { return v.initializer_range; }, vision);
}

int64_t QwenVLConfig::video_temporal_step(double seconds_per_grid) const {
  return std::visit(overloaded{[&](const Qwen2_5_VLVisionConfig& v) {
                                 return v.tokens_per_second * static_cast<int64_t>(seconds_per_grid);
                               },
                               [](const Qwen2VLVisionConfig&) { return int64_t{1}; },
                               [](const Qwen3VLVisionConfig&) { return int64_t{1}; }},
                    vision);
}

Qwen2_5_VLVisionConfig& QwenVLConfig::qwen2_5_vl_vision() {
  MM_CHECK(std::holds_alternative<Qwen2_5_VLVisionConfig>(vision), "a ", model_type(),
           " model has no Qwen2.5-VL vision config");
  return std::get<Qwen2_5_VLVisionConfig>(vision);
}

const Qwen2_5_VLVisionConfig& QwenVLConfig::qwen2_5_vl_vision() const {
  return const_cast<QwenVLConfig*>(this)->qwen2_5_vl_vision();
}

void QwenVLConfig::validate() const {
  std::visit([](const auto& v) { v.validate(); }, vision);
  text.validate();
  const auto [key, width] = std::visit(
      overloaded{[](const Qwen2_5_VLVisionConfig& v) { return std::pair{"out_hidden_size", v.out_hidden_size}; },
                 [](const Qwen2VLVisionConfig& v) { return std::pair{"hidden_size", v.hidden_size}; },
                 [](const Qwen3VLVisionConfig& v) { return std::pair{"out_hidden_size", v.out_hidden_size}; }},
      vision);
  MM_CHECK(width == text.hidden_size, "config.json: vision_config.", key, " (", width,
           ") must equal the language model's hidden_size (", text.hidden_size,
           "): the vision features replace token embeddings");
}

QwenVLConfig QwenVLConfig::from_json(const nlohmann::json& json, const std::string& file) {
  JsonView root(json, file);
  const auto model_type = root.get<std::string>("model_type");
  QwenVLConfig c;
  const auto& vision_json = root.child("vision_config").raw();
  if (model_type == "qwen2_5_vl") c.vision = Qwen2_5_VLVisionConfig::from_json(vision_json, file);
  else if (model_type == "qwen2_vl") c.vision = Qwen2VLVisionConfig::from_json(vision_json, file);
  else if (model_type == "qwen3_vl" || model_type == "qwen3_vl_moe")
    c.vision = Qwen3VLVisionConfig::from_json(vision_json, file);
  else if (model_type == "qwen3_5" || model_type == "qwen3_5_moe")
    // Qwen3_5VisionModel builds no DeepStack mergers whatever the config says.
    c.vision = Qwen3VLVisionConfig::from_json(vision_json, file, /*deepstack=*/false);
  else fail(file, ": model_type is '", model_type,
            "', expected one of 'qwen2_5_vl', 'qwen2_vl', 'qwen3_vl', 'qwen3_vl_moe', 'qwen3_5', 'qwen3_5_moe'");
  c.text = Qwen2TextConfig::from_json(root);
  if (model_type == "qwen3_vl" || model_type == "qwen3_vl_moe")
    read_qwen3_text_options(root, c.text, model_type == "qwen3_vl_moe");
  if (model_type == "qwen3_5" || model_type == "qwen3_5_moe") {
    // Qwen3.5: Qwen3-VL's tower without DeepStack (above), the hybrid decoder with interleaved M-RoPE.
    const JsonView t = root.has("text_config") ? root.child("text_config") : root;
    c.text.read_qwen3_5_fields(t);
    c.text.mrope_interleaved = true;
    if (model_type == "qwen3_5_moe") {
      // Qwen3_5MoeTextConfig: every layer sparse, the router renormalising its top-k, a gated
      // shared expert beside the routed ones.
      auto& moe = c.text.moe;
      moe.num_experts = t.get_or<int64_t>(t.has("num_experts") ? "num_experts" : "num_local_experts", 256);
      moe.num_experts_per_tok = t.get_or<int64_t>("num_experts_per_tok", 8);
      moe.moe_intermediate_size = t.get_or<int64_t>("moe_intermediate_size", 512);
      moe.shared_expert_intermediate_size = t.get_or<int64_t>("shared_expert_intermediate_size", 512);
      moe.router_aux_loss_coef = t.get_or<double>("router_aux_loss_coef", 0.001);
      moe.norm_topk_prob = true;
      MM_CHECK(moe.num_experts > 0, t.where("num_experts"), ": must be positive, got ", moe.num_experts);
      MM_CHECK(moe.shared_expert_intermediate_size > 0, t.where("shared_expert_intermediate_size"),
               ": must be positive, got ", moe.shared_expert_intermediate_size);
    }
  }
  c.image_token_id = root.get_or<int64_t>("image_token_id", c.image_token_id);
  c.video_token_id = root.get_or<int64_t>("video_token_id", c.video_token_id);
  c.vision_start_token_id = root.get_or<int64_t>("vision_start_token_id", c.vision_start_token_id);
  c.vision_end_token_id = root.get_or<int64_t>("vision_end_token_id", c.vision_end_token_id);
  const JsonView t = root.has("text_config") ? root.child("text_config") : root;
  if (t.has("eos_token_id")) c.eos_token_ids = ids_from(t.raw()["eos_token_id"]);
  else if (root.has("eos_token_id")) c.eos_token_ids = ids_from(root.raw()["eos_token_id"]);
  c.validate();
  return c;
}

QwenVLConfig QwenVLConfig::from_file(const std::filesystem::path& config_json) {
  return from_json(read_json_file(config_json), config_json.string());
}

nlohmann::json QwenVLConfig::to_json() const {
  const std::string type = model_type();
  nlohmann::json text_json = text.to_json(type + "_text");
  if (!eos_token_ids.empty()) text_json["eos_token_id"] = eos_token_ids;
  const std::string architecture = type == "qwen2_vl"   ? "Qwen2VLForConditionalGeneration"
                                   : type == "qwen3_vl" ? "Qwen3VLForConditionalGeneration"
                                   : type == "qwen3_vl_moe" ? "Qwen3VLMoeForConditionalGeneration"
                                   : type == "qwen3_5" ? "Qwen3_5ForConditionalGeneration"
                                   : type == "qwen3_5_moe" ? "Qwen3_5MoeForConditionalGeneration"
                                                        : "Qwen2_5_VLForConditionalGeneration";
  nlohmann::json vision_json = std::visit([](const auto& v) { return v.to_json(); }, vision);
  if (type == "qwen3_5" || type == "qwen3_5_moe") {  // Qwen3_5VisionConfig: Qwen3-VL's fields less DeepStack
    vision_json["model_type"] = type + "_vision";
    vision_json.erase("deepstack_visual_indexes");
  }
  return {{"model_type", type},
          {"architectures", {architecture}},
          {"vision_config", vision_json},
          {"text_config", text_json},
          {"image_token_id", image_token_id},
          {"video_token_id", video_token_id},
          {"vision_start_token_id", vision_start_token_id},
          {"vision_end_token_id", vision_end_token_id},
          {"tie_word_embeddings", text.tie_word_embeddings}};
}

}  // namespace mm
