#include "mm/train/model_flops.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "mm/models/qwen_vl/qwen_vl_config.h"
#include "mm/models/qwen2_5_vl/qwen2_5_vl_vision_layout.h"
#include "mm/models/wan/wan_transformer_config.h"

namespace mm {
namespace {

constexpr double kFlopsPerTrainedMac = 6;  // 2 forward, 4 backward

double squares(const std::vector<int64_t>& lengths) {
  double sum = 0;
  for (const auto s : lengths) sum += static_cast<double>(s) * static_cast<double>(s);
  return sum;
}

std::vector<int64_t> lengths_of(const std::vector<int64_t>& cumulative) {
  std::vector<int64_t> out;
  for (size_t i = 1; i < cumulative.size(); ++i) out.push_back(cumulative[i] - cumulative[i - 1]);
  return out;
}

}  // namespace

double decoder_training_flops(const DecoderShape& d, const std::vector<int64_t>& segments, int64_t logit_tokens) {
  double tokens = 0;
  for (const auto s : segments) tokens += static_cast<double>(s);
  const double h = static_cast<double>(d.hidden);
  const double head_dim = d.head_dim > 0 ? static_cast<double>(d.head_dim) : h / static_cast<double>(d.heads);
  const double q = static_cast<double>(d.heads) * head_dim, kv = static_cast<double>(d.kv_heads) * head_dim;
  // q and o: h x q; k and v: h x kv; gate, up, down: h x intermediate.
  const double layer_macs_per_token = 2 * h * q + 2 * h * kv + 3 * h * static_cast<double>(d.intermediate);
  const double causal_attention_macs = q * squares(segments);  // 2 * q * s^2 / 2 per segment
  const double macs = static_cast<double>(d.layers) * (layer_macs_per_token * tokens + causal_attention_macs) +
                      static_cast<double>(logit_tokens) * h * static_cast<double>(d.vocab);
  return kFlopsPerTrainedMac * macs;
}

double qwen_decoder_training_flops(const Qwen2TextConfig& t, const std::vector<int64_t>& segments,
                                   int64_t logit_tokens) {
  double tokens = 0;
  for (const auto s : segments) tokens += static_cast<double>(s);
  const double h = static_cast<double>(t.hidden_size);
  const double q = static_cast<double>(t.num_attention_heads * t.head_dim());
  const double kv = static_cast<double>(t.num_key_value_heads * t.head_dim());
  const auto& l = t.linear;
  const double key = static_cast<double>(l.num_key_heads * l.key_head_dim);
  const double value = static_cast<double>(l.num_value_heads * l.value_head_dim);
  const auto& m = t.moe;
  double macs = 0;
  for (int64_t i = 0; i < t.num_hidden_layers; ++i) {
    if (t.is_linear_attention_layer(i)) {
      // in_proj_qkv, in_proj_z, in_proj_a and in_proj_b, out_proj; the depthwise conv; the rule.
      const double projections = h * (2 * key + value) + h * value + 2 * h * static_cast<double>(l.num_value_heads) +
                                 value * h;
      const double conv = (2 * key + value) * static_cast<double>(l.conv_kernel);
      const double rule = 4 * static_cast<double>(l.num_value_heads * l.key_head_dim * l.value_head_dim);
      macs += tokens * (projections + conv + rule);
    } else {
      macs += tokens * (h * q * (t.attention_output_gate ? 2 : 1) + 2 * h * kv + q * h) + q * squares(segments);
    }
    if (m.is_sparse_layer(i)) {
      const double routed = static_cast<double>(m.num_experts_per_tok) * 3 * h * static_cast<double>(m.moe_intermediate_size);
      const double shared = m.shared_expert_intermediate_size > 0
                                ? 3 * h * static_cast<double>(m.shared_expert_intermediate_size) + h
                                : 0;
      macs += tokens * (h * static_cast<double>(m.num_experts) + routed + shared);
    } else {
      macs += tokens * 3 * h * static_cast<double>(t.intermediate_size);
    }
  }
  macs += static_cast<double>(logit_tokens) * h * static_cast<double>(t.vocab_size);
  return kFlopsPerTrainedMac * macs;
}

double qwen_mtp_training_flops(const Qwen2TextConfig& text, const std::vector<int64_t>& segments,
                               const std::vector<int64_t>& logit_tokens) {
  auto depth = text.multi_token_prediction_layers();
  depth.num_hidden_layers = 1;
  depth.layer_types.resize(1);
  double tokens = 0;
  for (const auto s : segments) tokens += static_cast<double>(s);
  const double h = static_cast<double>(text.hidden_size);
  double flops = 0;
  for (const int64_t rows : logit_tokens)
    flops += kFlopsPerTrainedMac * tokens * 2 * h * h + qwen_decoder_training_flops(depth, segments, rows);
  return flops;
}

namespace {

// Multiply-adds of one pass of the Qwen2.5-VL tower over `layout`'s patches.
double qwen2_5_vl_vision_macs(const Qwen2_5_VLVisionConfig& v, const std::vector<std::array<int64_t, 3>>& grid) {
  const auto layout =
      qwen2_5_vision_layout(grid, v.spatial_merge_size, std::max<int64_t>(1, v.window_size / v.spatial_merge_size / v.patch_size));
  const double patches = static_cast<double>(layout.num_patches), hv = static_cast<double>(v.hidden_size);
  const double patch_dim = static_cast<double>(v.in_channels * v.temporal_patch_size * v.patch_size * v.patch_size);
  const double block_macs_per_patch = 4 * hv * hv + 3 * hv * static_cast<double>(v.intermediate_size);
  const double full = 2 * hv * squares(lengths_of(layout.cu_seqlens));
  const double windowed = 2 * hv * squares(lengths_of(layout.cu_window_seqlens));
  double macs = patches * patch_dim * hv;
  for (int64_t b = 0; b < v.depth; ++b) {
    const bool is_full = std::find(v.fullatt_block_indexes.begin(), v.fullatt_block_indexes.end(), b) !=
                         v.fullatt_block_indexes.end();
    macs += patches * block_macs_per_patch + (is_full ? full : windowed);
  }
  const double merged_dim = hv * static_cast<double>(v.spatial_merge_size * v.spatial_merge_size);
  const double merged = patches / static_cast<double>(v.spatial_merge_size * v.spatial_merge_size);
  return macs + merged * (merged_dim * merged_dim + merged_dim * static_cast<double>(v.out_hidden_size));
}

// The same for the Qwen2-VL tower: every block attends within whole frames; fc1/fc2 MLP.
double qwen2_vl_vision_macs(const Qwen2VLVisionConfig& v, const std::vector<std::array<int64_t, 3>>& grid) {
  const auto layout = qwen2_5_vision_layout(grid, v.spatial_merge_size, 1);
  const double patches = static_cast<double>(layout.num_patches), e = static_cast<double>(v.embed_dim);
  const double patch_dim = static_cast<double>(v.in_channels * v.temporal_patch_size * v.patch_size * v.patch_size);
  const double block_macs_per_patch = 4 * e * e + 2 * e * static_cast<double>(v.mlp_hidden());
  const double attention = 2 * e * squares(lengths_of(layout.cu_seqlens));
  const double merged_dim = e * static_cast<double>(v.spatial_merge_size * v.spatial_merge_size);
  const double merged = patches / static_cast<double>(v.spatial_merge_size * v.spatial_merge_size);
  return patches * patch_dim * e + static_cast<double>(v.depth) * (patches * block_macs_per_patch + attention) +
         merged * (merged_dim * merged_dim + merged_dim * static_cast<double>(v.hidden_size));
}

// The same for the Qwen3-VL tower: attention within frames, fc1/fc2 MLP, the position table's
// four-tap blend, the merger and one more merger per DeepStack layer.
double qwen3_vl_vision_macs(const Qwen3VLVisionConfig& v, const std::vector<std::array<int64_t, 3>>& grid) {
  const auto layout = qwen2_5_vision_layout(grid, v.spatial_merge_size, 1);
  const double patches = static_cast<double>(layout.num_patches), hv = static_cast<double>(v.hidden_size);
  const double patch_dim = static_cast<double>(v.in_channels * v.temporal_patch_size * v.patch_size * v.patch_size);
  const double block_macs_per_patch = 4 * hv * hv + 2 * hv * static_cast<double>(v.intermediate_size);
  const double attention = 2 * hv * squares(lengths_of(layout.cu_seqlens));
  const double merged_dim = hv * static_cast<double>(v.spatial_merge_size * v.spatial_merge_size);
  const double merged = patches / static_cast<double>(v.spatial_merge_size * v.spatial_merge_size);
  const double mergers = static_cast<double>(1 + v.deepstack_visual_indexes.size());
  return patches * (patch_dim * hv + 4 * hv) + static_cast<double>(v.depth) * (patches * block_macs_per_patch + attention) +
         mergers * merged * (merged_dim * merged_dim + merged_dim * static_cast<double>(v.out_hidden_size));
}

}  // namespace

double qwen_vl_training_flops(const QwenVLConfig& config, const std::vector<int64_t>& text_segments,
                              int64_t logit_tokens, const std::vector<std::vector<int64_t>>& images) {
  const double flops = qwen_decoder_training_flops(config.text, text_segments, logit_tokens);
  if (images.empty()) return flops;
  std::vector<std::array<int64_t, 3>> grid;
  for (const auto& g : images) grid.push_back({g.at(0), g.at(1), g.at(2)});
  const double macs = std::visit(
      [&](const auto& v) {
        using Config = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<Config, Qwen2VLVisionConfig>) return qwen2_vl_vision_macs(v, grid);
        else if constexpr (std::is_same_v<Config, Qwen3VLVisionConfig>) return qwen3_vl_vision_macs(v, grid);
        else return qwen2_5_vl_vision_macs(v, grid);
      },
      config.vision);
  return flops + kFlopsPerTrainedMac * macs;
}

double wan_dit_training_flops(const WanTransformerConfig& c, int64_t samples, int64_t tokens, int64_t text_tokens,
                              int64_t image_tokens) {
  const double d = static_cast<double>(c.inner_dim()), n = static_cast<double>(tokens);
  const double l = static_cast<double>(text_tokens), img = static_cast<double>(image_tokens);
  // Per block and sample: self-attention q, k, v, o on the video tokens; cross-attention q, o on
  // the video tokens and k, v on the text; the FFN; attention products (non-causal).
  const double block = n * (4 * d * d) + n * (2 * d * d) + l * (2 * d * d) + n * (2 * d * static_cast<double>(c.ffn_dim)) +
                       2 * d * n * n + 2 * d * n * l;
  const double patch_dim = static_cast<double>(c.in_channels * c.patch_volume());
  const double out_dim = static_cast<double>(c.out_channels * c.patch_volume());
  // Patch embedding, output projection, and the text projection (text_dim -> d -> d).
  double ends = n * patch_dim * d + n * d * out_dim + l * (static_cast<double>(c.text_dim) * d + d * d);
  if (c.image_dim && image_tokens > 0) {
    // The image cross-attention's keys and values (add_k_proj, add_v_proj) and its products, per
    // block; the image embedding's MLP (image_dim -> image_dim -> d) once.
    const double e = static_cast<double>(*c.image_dim);
    ends += static_cast<double>(c.num_layers) * (img * 2 * d * d + 2 * d * n * img) + img * (e * e + e * d);
  }
  return kFlopsPerTrainedMac * static_cast<double>(samples) * (static_cast<double>(c.num_layers) * block + ends);
}

double peak_bf16_flops(const std::string& device_name) {
  std::string name;
  for (const char ch : device_name) name.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(ch))));
  // Dense (no sparsity) bf16 tensor-core peaks of the SXM parts, from NVIDIA's data sheets.
  const std::pair<const char*, double> kPeaks[] = {
      {"B200", 2250e12}, {"H200", 989e12}, {"H100", 989e12}, {"H800", 989e12}, {"A100", 312e12}, {"A800", 312e12},
      {"L40S", 362e12},  {"L4", 121e12},
  };
  for (const auto& [key, peak] : kPeaks)
    if (name.find(key) != std::string::npos) return peak;
  return 0;
}

}  // namespace mm
