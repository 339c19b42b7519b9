// umT5 encoder architecture, read from a Hugging Face config.json (model_type "umt5", as the
// text encoders of Wan2.1/2.2 ship it). Unlike T5, every umT5 layer has its own relative
// position bias, so "t5" configs are refused rather than read wrongly.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

namespace mm {

struct UMT5Config {
  int64_t vocab_size = 250112;
  int64_t d_model = 4096;
  int64_t d_kv = 64;    // per-head width; inner width = num_heads * d_kv (need not be d_model)
  int64_t d_ff = 10240;
  int64_t num_layers = 24;
  int64_t num_heads = 64;
  int64_t relative_attention_num_buckets = 32;
  int64_t relative_attention_max_distance = 128;
  double layer_norm_epsilon = 1e-6;
  // "gated-gelu" (umT5: gelu_new(wi_0 x) * wi_1 x) or an ungated "relu" / "gelu" (wi).
  std::string feed_forward_proj = "gated-gelu";

  bool gated() const { return feed_forward_proj.rfind("gated-", 0) == 0; }
  std::string activation() const;  // "gelu_tanh" (transformers' gelu_new) or "relu" / "gelu"
  void validate() const;           // names the offending field
  static UMT5Config from_file(const std::filesystem::path& config_json);
};

}  // namespace mm
