// Model directories for the CLI tests, derived from the tiny shapes template.
#pragma once
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "mm/core/json_config.h"
#include "testing.h"

namespace mm::testing {

// Every file of examples/qwen2.5vl/tiny-shapes copied into `dir` (created); returns its config.json,
// for the caller to turn into another family's.
inline nlohmann::json copy_tiny_shapes(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  const fs::path tiny_shapes = kSourceDir / "examples" / "qwen2.5vl" / "tiny-shapes";
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(tiny_shapes))
    fs::copy_file(entry.path(), dir / entry.path().filename(), fs::copy_options::overwrite_existing);
  return read_json_file(tiny_shapes / "config.json");
}

// examples/qwen2.5vl/tiny-shapes as a Qwen2-VL directory in `dir`: its config.json says qwen2_vl
// with a Qwen2-VL vision tower (LayerNorm, fc1/fc2 MLP, no windows) of the same widths; tokenizer
// and processor unchanged.
inline std::filesystem::path tiny_qwen2_vl_dir(const std::filesystem::path& dir) {
  auto config = copy_tiny_shapes(dir);
  config["model_type"] = "qwen2_vl";
  config["architectures"] = {"Qwen2VLForConditionalGeneration"};
  config["text_config"]["model_type"] = "qwen2_vl_text";
  config["vision_config"] = {{"model_type", "qwen2_vl_vision"}, {"depth", 2}, {"embed_dim", 64},
                             {"hidden_size", config["text_config"]["hidden_size"]}, {"mlp_ratio", 2},
                             {"num_heads", 4}, {"patch_size", 14}, {"spatial_merge_size", 2},
                             {"temporal_patch_size", 2}, {"initializer_range", 0.02}};
  std::ofstream(dir / "config.json") << config.dump(2);
  auto tokenizer_config = read_json_file(dir / "tokenizer_config.json");
  tokenizer_config["processor_class"] = "Qwen2VLProcessor";
  std::ofstream(dir / "tokenizer_config.json") << tokenizer_config.dump(2);
  return dir;
}

// examples/qwen2.5vl/tiny-shapes as a Qwen3-VL directory in `dir`: a Qwen3-VL vision tower
// (16-pixel patches, a learned position table, DeepStack into both decoder layers) and the Qwen3 decoder (q/k norms, head_dim 32
// with interleaved M-RoPE); the image processor takes 16-pixel patches, the video processor is
// Qwen3VLVideoProcessor; tokenizer and chat template unchanged.
inline std::filesystem::path tiny_qwen3_vl_dir(const std::filesystem::path& dir) {
  auto config = copy_tiny_shapes(dir);
  config["model_type"] = "qwen3_vl";
  config["architectures"] = {"Qwen3VLForConditionalGeneration"};
  auto& text = config["text_config"];
  text["model_type"] = "qwen3_vl_text";
  text["head_dim"] = 32;
  text["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"mrope_section", {6, 5, 5}},
                             {"mrope_interleaved", true}};
  for (const char* key : {"layer_types", "max_window_layers", "sliding_window", "use_sliding_window"}) text.erase(key);
  config["vision_config"] = {{"model_type", "qwen3_vl_vision"}, {"depth", 2}, {"hidden_size", 64},
                             {"intermediate_size", 128}, {"num_heads", 4}, {"out_hidden_size", text["hidden_size"]},
                             {"patch_size", 16}, {"spatial_merge_size", 2}, {"temporal_patch_size", 2},
                             {"num_position_embeddings", 16}, {"deepstack_visual_indexes", {0, 1}},
                             {"hidden_act", "gelu_pytorch_tanh"}, {"initializer_range", 0.02}};
  std::ofstream(dir / "config.json") << config.dump(2);
  auto image = read_json_file(dir / "preprocessor_config.json");
  image["patch_size"] = 16;
  image["size"] = {{"shortest_edge", 32 * 32 * 4}, {"longest_edge", 32 * 32 * 16}};
  std::ofstream(dir / "preprocessor_config.json") << image.dump(2);
  auto video = image;
  video.erase("image_processor_type");
  video["video_processor_type"] = "Qwen3VLVideoProcessor";
  std::ofstream(dir / "video_preprocessor_config.json") << video.dump(2);
  auto tokenizer_config = read_json_file(dir / "tokenizer_config.json");
  tokenizer_config["processor_class"] = "Qwen3VLProcessor";
  std::ofstream(dir / "tokenizer_config.json") << tokenizer_config.dump(2);
  return dir;
}

// dir/config.json turned into the MoE family `model_type` (text_config model_type
// `model_type`_text): every decoder layer sparse, 4 experts of 48, top 2, with a load-balancing
// weight that matters at this size. Returned for the family's own keys; the caller writes it.
inline nlohmann::json sparse_config(const std::filesystem::path& dir, const std::string& model_type,
                                    const std::string& architecture) {
  auto config = read_json_file(dir / "config.json");
  config["model_type"] = model_type;
  config["architectures"] = {architecture};
  auto& text = config["text_config"];
  text["model_type"] = model_type + "_text";
  text["num_experts"] = 4;
  text["num_experts_per_tok"] = 2;
  text["moe_intermediate_size"] = 48;
  text["router_aux_loss_coef"] = 0.1;
  return config;
}

// Qwen3-VL-MoE on the same files (sparse_config).
inline std::filesystem::path tiny_qwen3_vl_moe_dir(const std::filesystem::path& dir) {
  tiny_qwen3_vl_dir(dir);
  auto config = sparse_config(dir, "qwen3_vl_moe", "Qwen3VLMoeForConditionalGeneration");
  config["text_config"]["decoder_sparse_step"] = 1;
  std::ofstream(dir / "config.json") << config.dump(2);
  return dir;
}

// Qwen3.5 on the same files: Qwen3-VL's tower without DeepStack, and the hybrid decoder: a Gated
// DeltaNet layer (2:1 grouped heads) then a gated-attention layer with quarter rotary (8 of head_dim
// 32, mrope_section [2, 1, 1]), zero-centred norms.
inline std::filesystem::path tiny_qwen3_5_dir(const std::filesystem::path& dir) {
  tiny_qwen3_vl_dir(dir);
  auto config = read_json_file(dir / "config.json");
  config["model_type"] = "qwen3_5";
  config["architectures"] = {"Qwen3_5ForConditionalGeneration"};
  config["vision_config"]["model_type"] = "qwen3_5_vision";
  config["vision_config"].erase("deepstack_visual_indexes");
  auto& text = config["text_config"];
  text["model_type"] = "qwen3_5_text";
  text["layer_types"] = {"linear_attention", "full_attention"};
  text["linear_num_key_heads"] = 2;
  text["linear_num_value_heads"] = 4;
  text["linear_key_head_dim"] = 16;
  text["linear_value_head_dim"] = 16;
  text["linear_conv_kernel_dim"] = 4;
  text["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"mrope_section", {2, 1, 1}},
                             {"mrope_interleaved", true}, {"partial_rotary_factor", 0.25}};
  std::ofstream(dir / "config.json") << config.dump(2);
  return dir;
}

// Qwen3.5 as above whose config.json names a multi-token-prediction head of one depth (from
// scratch, the head is built and initialised with the model).
inline std::filesystem::path tiny_qwen3_5_with_mtp_dir(const std::filesystem::path& dir) {
  tiny_qwen3_5_dir(dir);
  auto config = read_json_file(dir / "config.json");
  config["text_config"]["mtp_num_hidden_layers"] = 1;
  std::ofstream(dir / "config.json") << config.dump(2);
  return dir;
}

// Qwen3.5-MoE on the same files (sparse_config): both hybrid layers sparse beside a gated shared
// expert.
inline std::filesystem::path tiny_qwen3_5_moe_dir(const std::filesystem::path& dir) {
  tiny_qwen3_5_dir(dir);
  auto config = sparse_config(dir, "qwen3_5_moe", "Qwen3_5MoeForConditionalGeneration");
  config["vision_config"]["model_type"] = "qwen3_5_moe_vision";
  config["text_config"]["shared_expert_intermediate_size"] = 64;
  std::ofstream(dir / "config.json") << config.dump(2);
  return dir;
}

}  // namespace mm::testing
