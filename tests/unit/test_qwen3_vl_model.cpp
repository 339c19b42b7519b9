// Qwen3-VL against transformers 5.17 (tests/reference/qwen3_vl_model.py): M-RoPE positions exact
// with each video frame its own run between timestamps, logits within 1e-4 and 32 greedy tokens
// identical for every case of both configs (the transformers 5 layout with GQA and two DeepStack
// layers; the published layout with tied embeddings and one), bf16 no further from fp32 than
// transformers' bf16, DeepStack reaching the decoder, and the export writing what transformers saved.
#include <algorithm>

#include "mm/models/qwen3_vl/qwen3_vl_vision.h"
#include "mm/nn/rotary.h"
#include "mm/nn/weights.h"
#include "bf16_fidelity.h"
#include "qwen_vl_parity.h"

namespace mm::testing {
namespace {

const std::string kOracle = "qwen3_vl_model";

QwenVLForConditionalGeneration load(const std::string& name, torch::Dtype dtype = torch::kFloat32) {
  return QwenVLForConditionalGenerationImpl::from_pretrained(model_dir(name, kOracle), dtype);
}

class Qwen3VLParity : public ::testing::TestWithParam<std::string> {};

TEST_P(Qwen3VLParity, LoadsWithItsOwnTowerAndQwen3Decoder) {
  auto model = load(GetParam());
  const auto& config = model->config();
  EXPECT_EQ(config.model_type(), "qwen3_vl");
  EXPECT_TRUE(config.video_frames_apart());
  EXPECT_TRUE(config.text.qk_norm && config.text.mrope_interleaved);
  EXPECT_NE(config.text.head_dim() * config.text.num_attention_heads, config.text.hidden_size);
  EXPECT_NE(dynamic_cast<Qwen3VLVisionModelImpl*>(model->visual.get()), nullptr);
}

TEST_P(Qwen3VLParity, PositionIdsMatchGetRopeIndex) {
  auto model = load(GetParam());
  expect_positions_match(*model, *cases_of(GetParam(), kOracle));
}

TEST_P(Qwen3VLParity, LogitsMatchTransformers) {
  auto model = load(GetParam());
  expect_logits_match(*model, *cases_of(GetParam(), kOracle), "Qwen3-VL config " + GetParam());
}

TEST_P(Qwen3VLParity, ThirtyTwoGreedyTokensEqualTransformers) {
  auto model = load(GetParam());
  auto cases = cases_of(GetParam(), kOracle);
  EXPECT_EQ(model->config().eos_token_ids, std::vector<int64_t>{cases->tensor("eos_token_id").item<int64_t>()});
  expect_greedy_tokens_match(model, *cases);
}

TEST_P(Qwen3VLParity, Bfloat16ErrorIsNoLargerThanTransformers) {
  auto model = load(GetParam(), torch::kBFloat16);
  for (const auto& [name, tensor] : named_weights(*model)) ASSERT_EQ(tensor.scalar_type(), torch::kBFloat16) << name;
  expect_bf16_no_worse_than_transformers(*model, *cases_of(GetParam(), kOracle), "Qwen3-VL config " + GetParam());
}

INSTANTIATE_TEST_SUITE_P(Configs, Qwen3VLParity, ::testing::Values("A", "B"));

// Without the DeepStack features the image and video positions' logits change (so the parity
// above proves they reach the decoder), and a caller that cannot take them is refused.
TEST(Qwen3VLModel, DeepstackFeaturesReachTheDecoder) {
  auto model = load("A");
  auto cases = cases_of("A", kOracle);
  torch::NoGradGuard no_grad;
  auto in = inputs_of(*cases, "image_video");
  DeepstackInputs deepstack;
  const auto embeds = model->embed_inputs(in, &deepstack);
  ASSERT_EQ(deepstack.embeds.size(), 2u);
  const auto visual = (in.input_ids == model->config().image_token_id) | (in.input_ids == model->config().video_token_id);
  EXPECT_TRUE(torch::equal(deepstack.visual_mask, visual));
  EXPECT_EQ(deepstack.embeds[0].size(0), visual.sum().item<int64_t>());
  const auto positions = model->get_rope_index(in).position_ids;
  const auto with = model->lm_logits(model->decode(embeds, positions, {}, nullptr, {}, &deepstack));
  const auto without = model->lm_logits(model->decode(embeds, positions));
  EXPECT_LE(max_abs_diff(with, field(*cases, "image_video", "logits")), 1e-4);
  EXPECT_GT(max_abs_diff(with, without), 1e-3);
  EXPECT_THROW_MSG(model->embed_inputs(in), "adds DeepStack features of its images in its first decoder layers");
  // Text alone needs none.
  EXPECT_NO_THROW(model->embed_inputs(inputs_of(*cases, "text")));
}

TEST(Qwen3VLModel, InterleavedMropeTakesEachAxisWhereTheReferenceDoes) {
  const auto inv_freq = rope_inv_freq(24, 10000.0, torch::kCPU);  // 12 frequencies
  auto positions = torch::zeros({3, 1, 1}, torch::kInt64);
  positions[1].fill_(5);  // height only
  const auto rope = interleaved_mrope_cos_sin(inv_freq, positions, {4, 4, 4}, torch::kFloat32);
  // Height owns frequencies 1, 4, 7, 10 (j % 3 == 1, j < 12); the rest see position 0.
  for (int64_t j = 0; j < 12; ++j) {
    const bool height = j % 3 == 1;
    EXPECT_EQ(rope.sin[0][0][j].item<float>() != 0.0f, height) << j;
    EXPECT_EQ(rope.sin[0][0][j + 12].item<float>(), rope.sin[0][0][j].item<float>()) << j;
  }
  // With equal axes it is plain 1D rotary.
  const auto ramp = torch::arange(0, 20, torch::kInt64).view({1, 20});
  const auto plain = rope_cos_sin(inv_freq, ramp, torch::kFloat32);
  const auto multi = interleaved_mrope_cos_sin(inv_freq, ramp.unsqueeze(0).expand({3, 1, 20}), {4, 4, 4}, torch::kFloat32);
  EXPECT_TRUE(torch::equal(plain.cos, multi.cos));
}

TEST(Qwen3VLModel, VideoFramesAreRunsOfTheirOwn) {
  auto model = load("A");
  auto cases = cases_of("A", kOracle);
  auto in = inputs_of(*cases, "video");  // one (3, 4, 6) video: three runs of 6 tokens
  auto ids = in.input_ids.clone();
  // Joining the runs (the timestamps and start/end tokens made placeholders) is refused.
  const auto video = ids == model->config().video_token_id;
  const auto first = video.nonzero()[0][1].item<int64_t>();
  ids[0][first + 6] = model->config().video_token_id;
  in.input_ids = ids;
  EXPECT_THROW_MSG(model->get_rope_index(in), "video placeholder run at column");
  in.input_ids = inputs_of(*cases, "text").input_ids;
  EXPECT_THROW_MSG(model->get_rope_index(in), "video_grid_thw has 3 frames (one placeholder run each)");
}

// The export writes the names and tensors of transformers' state dict (config B holds exactly
// those), and a config.json that loads back as Qwen3-VL with the same logits.
TEST(Qwen3VLModel, TheExportWritesTransformersNamesAndLoadsBack) {
  auto model = load("B");
  expect_export_writes_the_source(model, model_dir("B", kOracle), temp_dir("qwen3_vl_export"), *cases_of("B", kOracle),
                                  "qwen3_vl");
}

}  // namespace
}  // namespace mm::testing
