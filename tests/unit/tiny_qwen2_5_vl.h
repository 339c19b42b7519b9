// Shared by the training-side model tests (LoRA, recompute, packing, export): a tiny Qwen2.5-VL
// built in C++ (the shape of config A in tests/reference/qwen2_5_vl_model.py) and samples with
// images laid out as the processor lays them out.
#pragma once
#include <torch/torch.h>

#include <vector>

#include "mm/models/qwen_vl/qwen_vl_init_weights.h"
#include "mm/models/qwen_vl/qwen_vl_model.h"

namespace mm::testing {

inline QwenVLConfig tiny_config(bool tied = false) {
  QwenVLConfig c;
  auto& v = c.qwen2_5_vl_vision();
  v.depth = 4, v.hidden_size = 32, v.intermediate_size = 48, v.num_heads = 2, v.out_hidden_size = 64;
  v.patch_size = 14, v.window_size = 56, v.fullatt_block_indexes = {1, 3}, v.tokens_per_second = 4;
  v.initializer_range = 0.1;
  auto& t = c.text;
  t.vocab_size = 300, t.hidden_size = 64, t.intermediate_size = 96, t.num_hidden_layers = 2;
  t.num_attention_heads = 4, t.num_key_value_heads = 2, t.rms_norm_eps = 1e-6, t.rope_theta = 10000.0;
  t.mrope_section = {2, 3, 3}, t.tie_word_embeddings = tied, t.initializer_range = 0.1;
  c.image_token_id = 290, c.video_token_id = 291, c.vision_start_token_id = 292, c.vision_end_token_id = 293;
  c.eos_token_ids = {2};
  return c;
}

inline QwenVLForConditionalGeneration tiny_model(uint64_t seed, bool tied = false) {
  QwenVLForConditionalGeneration model(tiny_config(tied));
  init_weights(model, seed);
  return model;
}

// input_ids [1, n]: bos, `before` text tokens, <vision_start> image pads <vision_end>, `after`
// text tokens, for one image of grid (1, h, w) patches; pixel_values [h * w, 3 * 2 * 14 * 14].
inline QwenVLInputs tiny_sample(const QwenVLConfig& c, int64_t before, int64_t h, int64_t w, int64_t after,
                                uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto text = [&](int64_t n) { return torch::randint(3, 280, {n}, gen, torch::kInt64); };
  const int64_t merged = h * w / (c.spatial_merge_size() * c.spatial_merge_size());
  QwenVLInputs in;
  in.input_ids = torch::cat({torch::tensor({int64_t{1}}), text(before), torch::tensor({c.vision_start_token_id}),
                             torch::full({merged}, c.image_token_id, torch::kInt64),
                             torch::tensor({c.vision_end_token_id}), text(after)})
                     .unsqueeze(0);
  const auto& v = c.qwen2_5_vl_vision();
  const int64_t row = v.in_channels * v.temporal_patch_size * v.patch_size * v.patch_size;
  in.pixel_values = torch::randn({h * w, row}, gen);
  in.image_grid_thw = torch::tensor({int64_t{1}, h, w}).view({1, 3});
  return in;
}

// Next-token cross entropy summed over the sample (no normalization): logits [1, n, vocab].
inline torch::Tensor summed_next_token_loss(const torch::Tensor& logits, const torch::Tensor& input_ids) {
  const int64_t n = logits.size(1);
  return torch::nn::functional::cross_entropy(
      logits[0].slice(0, 0, n - 1).to(torch::kFloat32), input_ids[0].slice(0, 1, n).to(logits.device()),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
}

}  // namespace mm::testing
