// The architecture of a Qwen-VL model, read from its Hugging Face config.json: the vision tower of
// its family (config.json model_type "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe" or "qwen3_5"), the Qwen2 decoder
// with M-RoPE (for Qwen3-VL with Qwen3's options: q/k norms, head_dim of its own, no biases, and
// interleaved M-RoPE; for Qwen3.5 the hybrid decoder of Gated DeltaNet and gated attention, after
// Qwen3-VL's tower without DeepStack), and the special token ids. Both layouts found in the wild are accepted: text fields at the top
// level with `rope_scaling` (the published checkpoints) and a nested `text_config` with
// `rope_parameters` (transformers 5).
#pragma once
#include <filesystem>
#include <string>
#include <variant>
#include <vector>

#include "mm/core/json_config.h"
#include "mm/models/qwen2/qwen2_text_config.h"
#include "mm/models/qwen2_5_vl/qwen2_5_vl_vision_config.h"
#include "mm/models/qwen2_vl/qwen2_vl_vision_config.h"
#include "mm/models/qwen3_vl/qwen3_vl_vision_config.h"

namespace mm {

// One alternative per family; the alternative held says which family the model is.
using QwenVLVisionConfig = std::variant<Qwen2_5_VLVisionConfig, Qwen2VLVisionConfig, Qwen3VLVisionConfig>;

struct QwenVLConfig {
  QwenVLVisionConfig vision;  // default: Qwen2.5-VL
  Qwen2TextConfig text;
  int64_t image_token_id = 151655;
  int64_t video_token_id = 151656;
  int64_t vision_start_token_id = 151652;
  int64_t vision_end_token_id = 151653;
  std::vector<int64_t> eos_token_ids;  // from config.json / generation_config.json

  // config.json's model_type: "qwen2_5_vl", "qwen2_vl", "qwen3_vl", "qwen3_vl_moe" (Qwen3-VL's
  // tower with sparse MoE layers in the decoder) or "qwen3_5" (the tower with the hybrid decoder).
  std::string model_type() const;
  // Whether a video's frames stand apart in the text, each its own placeholder run between
  // timestamps with its own positions (Qwen3-VL), rather than one run per video.
  bool video_frames_apart() const;
  // What the decoder and the data pipeline need of the vision tower, whichever family it is.
  int64_t spatial_merge_size() const;
  int64_t vision_depth() const;
  double vision_initializer_range() const;
  // The M-RoPE temporal step between a video's consecutive merged frames, given its seconds per
  // temporal grid step: Qwen2.5-VL's tokens_per_second * int(seconds) (the reference truncates),
  // Qwen2-VL's 1 (it has no notion of time), Qwen3-VL's 1 (its frames stand apart; time is in
  // the timestamp text).
  int64_t video_temporal_step(double seconds_per_grid) const;

  // A Qwen2.5-VL vision config, for code that builds one; throws when this is another family.
  Qwen2_5_VLVisionConfig& qwen2_5_vl_vision();
  const Qwen2_5_VLVisionConfig& qwen2_5_vl_vision() const;

  void validate() const;
  // Parses config.json; errors name the file and key; an unknown model_type lists the supported.
  static QwenVLConfig from_json(const nlohmann::json& json, const std::string& file);
  static QwenVLConfig from_file(const std::filesystem::path& config_json);
  nlohmann::json to_json() const;  // the transformers 5 layout, loadable by transformers
};

}  // namespace mm
