// The model FLOPs formulas of train/model_flops.h against hand counts on small shapes (Qwen3.5's
// hybrid and sparse decoder layers included), the count
// of a VLM training micro-batch (the same for its samples padded, packed or alone), and the peak
// lookup by GPU name.
#include "mm/models/qwen_vl/qwen_vl_config.h"
#include "mm/tasks/vlm_step.h"
#include "mm/models/wan/wan_transformer_config.h"
#include "mm/train/model_flops.h"
#include "testing.h"

TEST(ModelFlops, DecoderMatchesAHandCount) {
  // head_dim 2, kv width 2. Per token and layer: q, o 2*4*4 + k, v 2*4*2 + MLP 3*4*6 = 120 MACs;
  // 8 tokens: 960. Causal attention: 4 * (3^2 + 5^2) = 136. Two layers: 2192. LM head on 8 rows:
  // 8*4*10 = 320. 2512 MACs, 6 FLOPs each.
  const mm::DecoderShape shape{2, 4, 6, 2, 1, 10};
  EXPECT_DOUBLE_EQ(mm::decoder_training_flops(shape, {3, 5}, 8), 6.0 * 2512);
}

TEST(ModelFlops, ADecoderWithItsOwnHeadDimCountsItsAttentionWidth) {
  // Qwen3: 2 heads of 3 (q width 6, kv width 3) on hidden 4. Per token and layer: q, o 2*4*6 +
  // k, v 2*4*3 + MLP 3*4*6 = 144 MACs; 8 tokens: 1152. Causal attention: 6 * (3^2 + 5^2) = 204.
  // Two layers: 2712. LM head on 8 rows: 320. 3032 MACs.
  const mm::DecoderShape shape{2, 4, 6, 2, 1, 10, 3};
  EXPECT_DOUBLE_EQ(mm::decoder_training_flops(shape, {3, 5}, 8), 6.0 * 3032);
}

TEST(ModelFlops, TheQwenDecoderCountEqualsTheShapeCountForQwen2AndQwen3) {
  mm::Qwen2TextConfig t;
  t.num_hidden_layers = 2, t.hidden_size = 4, t.intermediate_size = 6, t.num_attention_heads = 2;
  t.num_key_value_heads = 1, t.vocab_size = 10;
  EXPECT_DOUBLE_EQ(mm::qwen_decoder_training_flops(t, {3, 5}, 8), 6.0 * 2512);  // as DecoderMatchesAHandCount
  t.explicit_head_dim = 3;
  EXPECT_DOUBLE_EQ(mm::qwen_decoder_training_flops(t, {3, 5}, 8), 6.0 * 3032);
}

TEST(ModelFlops, AHybridDecoderCountsEachLayerForWhatItIs) {
  // Qwen3.5: hidden 4, a Gated DeltaNet layer (1 key head and 2 value heads; key dim 2, value dim 3;
  // conv 2) then a gated-attention layer (2 heads of 2 over 1 kv head), MLP 6, 8 tokens in {3, 5}.
  mm::Qwen2TextConfig t;
  t.num_hidden_layers = 2, t.hidden_size = 4, t.intermediate_size = 6, t.num_attention_heads = 2;
  t.num_key_value_heads = 1, t.vocab_size = 10, t.explicit_head_dim = 2, t.attention_output_gate = true;
  t.layer_types = {"linear_attention", "full_attention"};
  t.linear = {1, 2, 2, 3, 2};
  // DeltaNet per token: in_proj_qkv 4*(2+2+6) + in_proj_z 4*6 + in_proj_a/b 2*4*2 + out_proj 6*4 = 104,
  // conv (2+2+6)*2 = 20, rule 4*2*2*3 = 48: 172, 8 tokens 1376. Attention per token: q_proj with
  // its gate 4*4*2 + k, v 2*4*2 + o 4*4 = 64, 8 tokens 512, causal attention 4*(9+25) = 136.
  // MLPs 2 * 8 * 3*4*6 = 1152. LM head 320. 3496 MACs.
  EXPECT_DOUBLE_EQ(mm::qwen_decoder_training_flops(t, {3, 5}, 8), 6.0 * 3496);
  // Sparse MLPs (4 experts of 3, top 2, a shared expert of 5): per token router 4*4 + two experts
  // 2*3*4*3 + shared 3*4*5 + its gate 4 = 152 instead of 72: 2 * 8 * 80 more.
  t.moe.num_experts = 4, t.moe.num_experts_per_tok = 2, t.moe.moe_intermediate_size = 3;
  t.moe.shared_expert_intermediate_size = 5;
  EXPECT_DOUBLE_EQ(mm::qwen_decoder_training_flops(t, {3, 5}, 8), 6.0 * (3496 + 2 * 8 * 80));
}

TEST(ModelFlops, TheMultiTokenPredictionHeadMatchesAHandCount) {
  // The hybrid decoder above with a head of 2 depths over 8 tokens in {3, 5}, 5 and 3 target rows.
  mm::Qwen2TextConfig t;
  t.num_hidden_layers = 2, t.hidden_size = 4, t.intermediate_size = 6, t.num_attention_heads = 2;
  t.num_key_value_heads = 1, t.vocab_size = 10, t.explicit_head_dim = 2, t.attention_output_gate = true;
  t.layer_types = {"linear_attention", "full_attention"};
  t.mtp_num_hidden_layers = 2;
  // Per depth: fc 8 * 2*4*4 = 256, the gated-attention layer 512 + 136 and its MLP 8 * 3*4*6 = 576:
  // 1480, twice; LM heads (5 + 3) * 4*10 = 320. 3280 MACs.
  EXPECT_DOUBLE_EQ(mm::qwen_mtp_training_flops(t, {3, 5}, {5, 3}), 6.0 * 3280);
  // Sparse (as above): the head's layers are sparse too, 8 * 80 more per depth.
  t.moe.num_experts = 4, t.moe.num_experts_per_tok = 2, t.moe.moe_intermediate_size = 3;
  t.moe.shared_expert_intermediate_size = 5;
  t.moe.mlp_only_layers = {0, 1};  // the decoder's choice; the head's layers stay sparse
  EXPECT_DOUBLE_EQ(mm::qwen_mtp_training_flops(t, {3, 5}, {5, 3}), 6.0 * (3280 + 2 * 8 * 80));
}

TEST(ModelFlops, QwenVisionTowerMatchesAHandCount) {
  mm::QwenVLConfig c;
  auto& v = c.qwen2_5_vl_vision();
  v.depth = 2, v.hidden_size = 4, v.intermediate_size = 6, v.num_heads = 1, v.out_hidden_size = 5;
  v.in_channels = 1, v.temporal_patch_size = 1, v.patch_size = 1, v.spatial_merge_size = 2;
  v.window_size = 2, v.fullatt_block_indexes = {1};  // windows of one merged unit (4 patches)
  // One 1x4x4 image: 16 patches. Patch embedding 16*1*4 = 64. Per block 16*(4*16 + 3*4*6) = 2176,
  // plus attention: block 0 over 4 windows of 4 (2*4*4*16 = 512), block 1 over the frame of 16
  // (2*4*256 = 2048). Merger: 4 merged tokens of 16: 4*(16*16 + 16*5) = 1344. Sum 8320 MACs.
  c.text.num_hidden_layers = 1, c.text.hidden_size = 4, c.text.num_attention_heads = 1, c.text.num_key_value_heads = 1;
  const double text_only = mm::qwen_vl_training_flops(c, {7}, 7, {});
  EXPECT_DOUBLE_EQ(mm::qwen_vl_training_flops(c, {7}, 7, {{1, 4, 4}}) - text_only, 6.0 * 8320);
}

TEST(ModelFlops, Qwen2VLVisionTowerMatchesAHandCount) {
  mm::QwenVLConfig c;
  mm::Qwen2VLVisionConfig v;
  v.depth = 2, v.embed_dim = 4, v.mlp_ratio = 1, v.num_heads = 1, v.hidden_size = 5;
  v.in_channels = 1, v.temporal_patch_size = 1, v.patch_size = 1, v.spatial_merge_size = 2;
  c.vision = v;
  // One 1x4x4 image: 16 patches. Patch embedding 16*1*4 = 64. Per block 16*(4*16 + 2*4*4) = 1536
  // plus attention over the whole frame of 16 (2*4*256 = 2048): 3584, twice. Merger: 4 merged
  // tokens of 16: 4*(16*16 + 16*5) = 1344. Sum 8576 MACs.
  c.text.num_hidden_layers = 1, c.text.hidden_size = 4, c.text.num_attention_heads = 1, c.text.num_key_value_heads = 1;
  const double text_only = mm::qwen_vl_training_flops(c, {7}, 7, {});
  EXPECT_DOUBLE_EQ(mm::qwen_vl_training_flops(c, {7}, 7, {{1, 4, 4}}) - text_only, 6.0 * 8576);
}

TEST(ModelFlops, Qwen3VLVisionTowerMatchesAHandCount) {
  mm::QwenVLConfig c;
  mm::Qwen3VLVisionConfig v;
  v.depth = 2, v.hidden_size = 4, v.intermediate_size = 4, v.num_heads = 1, v.out_hidden_size = 5;
  v.in_channels = 1, v.temporal_patch_size = 1, v.patch_size = 1, v.spatial_merge_size = 2;
  v.deepstack_visual_indexes = {0};
  c.vision = v;
  // One 1x4x4 image: 16 patches. Patch embedding 16*1*4 = 64, the position table's four taps
  // 16*4*4 = 256. Per block 16*(4*16 + 2*4*4) = 1536 plus attention over the frame of 16
  // (2*4*256 = 2048): 3584, twice. The merger and one DeepStack merger: 2 * 4*(16*16 + 16*5) =
  // 2688. Sum 10176 MACs.
  c.text.num_hidden_layers = 1, c.text.hidden_size = 4, c.text.num_attention_heads = 1, c.text.num_key_value_heads = 1;
  const double text_only = mm::qwen_vl_training_flops(c, {7}, 7, {});
  EXPECT_DOUBLE_EQ(mm::qwen_vl_training_flops(c, {7}, 7, {{1, 4, 4}}) - text_only, 6.0 * 10176);
}

// A sample of `length` tokens whose last `targets` are supervised, with one 1 x h x w image.
mm::TrainSample flops_sample(int64_t length, int64_t targets, int64_t h, int64_t w) {
  mm::TrainSample s;
  s.input_ids = torch::full({length}, 7, torch::kInt64);
  s.targets = torch::full({length}, mm::kIgnoreIndex, torch::kInt64);
  s.targets.slice(0, length - 1 - targets, length - 1).fill_(5);
  s.position_ids = torch::arange(length).expand({3, length}).contiguous();
  s.pixel_values = torch::zeros({h * w, 3 * 2 * 14 * 14});
  s.image_grid_thw = torch::tensor({int64_t{1}, h, w}).view({1, 3});
  return s;
}

TEST(ModelFlops, AVlmMicroBatchCountsItsSamplesWhetherPaddedOrPacked) {
  mm::QwenVLConfig c;  // the published Qwen2.5-VL-7B shapes: the counts are arithmetic only
  const std::vector<mm::TrainSample> samples = {flops_sample(40, 6, 4, 4), flops_sample(25, 3, 2, 6),
                                                flops_sample(60, 11, 8, 4)};
  const double expected = mm::qwen_vl_training_flops(c, {40, 25, 60}, 20, {{1, 4, 4}, {1, 2, 6}, {1, 8, 4}});
  EXPECT_DOUBLE_EQ(mm::vlm_batch_training_flops(c, mm::collate_padded(samples, 0)), expected);
  EXPECT_DOUBLE_EQ(mm::vlm_batch_training_flops(c, mm::collate_packed(samples)), expected);
  double alone = 0;
  for (const auto& s : samples) alone += mm::vlm_batch_training_flops(c, mm::collate_padded({s}, 0));
  EXPECT_NEAR(alone, expected, 1e-12 * expected);
}

TEST(ModelFlops, WanDitMatchesAHandCount) {
  mm::WanTransformerConfig c;
  c.num_attention_heads = 2, c.attention_head_dim = 4, c.ffn_dim = 16, c.num_layers = 1;
  c.in_channels = 4, c.out_channels = 4, c.patch_size = {1, 2, 2}, c.text_dim = 6;
  // d = 8, 10 tokens, 3 text tokens. Block: self q,k,v,o 10*256 = 2560; cross q,o 10*128 = 1280;
  // cross k,v 3*128 = 384; FFN 10*2*8*16 = 2560; self-attention 2*8*100 = 1600; cross 2*8*10*3 =
  // 480: 8864. Ends: patch embedding 10*16*8 = 1280, output 10*8*16 = 1280, text projection
  // 3*(6*8 + 64) = 336: 2896. Two samples: 23520 MACs.
  EXPECT_DOUBLE_EQ(mm::wan_dit_training_flops(c, 2, 10, 3), 6.0 * 23520);
  // Image-conditioned (image_dim 5), 4 CLIP tokens: image k, v 4*128 = 512; products 2*8*10*4 =
  // 640; the image MLP 4*(25 + 40) = 260: 1412 more per sample. Without image_dim they add nothing.
  EXPECT_DOUBLE_EQ(mm::wan_dit_training_flops(c, 2, 10, 3, 4), 6.0 * 23520);
  c.image_dim = 5;
  EXPECT_DOUBLE_EQ(mm::wan_dit_training_flops(c, 2, 10, 3, 4), 6.0 * (23520 + 2 * 1412));
}

TEST(ModelFlops, PeaksComeFromTheGpuName) {
  EXPECT_DOUBLE_EQ(mm::peak_bf16_flops("NVIDIA H200"), 989e12);
  EXPECT_DOUBLE_EQ(mm::peak_bf16_flops("NVIDIA A100-SXM4-80GB"), 312e12);
  EXPECT_DOUBLE_EQ(mm::peak_bf16_flops("NVIDIA L40S"), 362e12);
  EXPECT_DOUBLE_EQ(mm::peak_bf16_flops("NVIDIA L4"), 121e12);
  EXPECT_DOUBLE_EQ(mm::peak_bf16_flops("Tesla T4"), 0);
}
