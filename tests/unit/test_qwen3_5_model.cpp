// Qwen3.5 (the vision tower of Qwen3-VL without DeepStack, the hybrid decoder of Gated DeltaNet and
// gated-attention layers) against transformers 5.17's Qwen3_5ForConditionalGeneration
// (tests/reference/qwen3_5_model.py), on two configs (the published three-DeltaNet-then-attention
// pattern with quarter rotary; alternating layers with half rotary and tied embeddings, in the
// module-tree layout): M-RoPE positions exact with each video frame its own run, logits within 1e-4
// and 32 greedy tokens identical (prefill through the chunked DeltaNet form, decoding through the
// recurrent one and the KV cache) for text, images, videos and a left-padded batch; bf16 no further
// from fp32 than transformers' bf16; the export writing what transformers saved; the MTP head of a
// published checkpoint skipped on load as transformers skips it.
#include "mm/core/safetensors.h"
#include "mm/models/qwen3_vl/qwen3_vl_vision.h"
#include "mm/nn/weights.h"
#include "bf16_fidelity.h"
#include "qwen_vl_parity.h"

namespace mm::testing {
namespace {

const std::string kOracle = "qwen3_5_model";

QwenVLForConditionalGeneration load(const std::string& name, torch::Dtype dtype = torch::kFloat32) {
  return QwenVLForConditionalGenerationImpl::from_pretrained(model_dir(name, kOracle), dtype);
}

class Qwen3_5Parity : public ::testing::TestWithParam<std::string> {};

TEST_P(Qwen3_5Parity, LoadsWithQwen3VLTowerWithoutDeepstackAndTheHybridDecoder) {
  auto model = load(GetParam());
  const auto& config = model->config();
  EXPECT_EQ(config.model_type(), "qwen3_5");
  EXPECT_TRUE(config.video_frames_apart());
  EXPECT_TRUE(config.text.mrope_interleaved && config.text.attention_output_gate && config.text.zero_centered_norms);
  EXPECT_LT(config.text.rotary_dim(), config.text.head_dim());
  auto* visual = dynamic_cast<Qwen3VLVisionModelImpl*>(model->visual.get());
  ASSERT_NE(visual, nullptr);
  EXPECT_EQ(visual->deepstack_merger_list->size(), 0u);
  int64_t linear = 0;
  for (size_t i = 0; i < model->model->layers->size(); ++i)
    linear += static_cast<bool>(model->model->layers->ptr<Qwen2DecoderLayerImpl>(i)->linear_attn);
  EXPECT_EQ(linear, GetParam() == "A" ? 3 : 2);
}

TEST_P(Qwen3_5Parity, PositionIdsMatchGetRopeIndex) {
  auto model = load(GetParam());
  expect_positions_match(*model, *cases_of(GetParam(), kOracle));
}

TEST_P(Qwen3_5Parity, LogitsMatchTransformers) {
  auto model = load(GetParam());
  expect_logits_match(*model, *cases_of(GetParam(), kOracle), "Qwen3.5 config " + GetParam());
}

TEST_P(Qwen3_5Parity, ThirtyTwoGreedyTokensThroughBothCachesEqualTransformers) {
  auto model = load(GetParam());
  auto cases = cases_of(GetParam(), kOracle);
  EXPECT_EQ(model->config().eos_token_ids, std::vector<int64_t>{cases->tensor("eos_token_id").item<int64_t>()});
  expect_greedy_tokens_match(model, *cases);
}

TEST_P(Qwen3_5Parity, Bfloat16ErrorIsNoLargerThanTransformers) {
  auto model = load(GetParam(), torch::kBFloat16);
  for (const auto& [name, tensor] : named_weights(*model)) ASSERT_EQ(tensor.scalar_type(), torch::kBFloat16) << name;
  expect_bf16_no_worse_than_transformers(*model, *cases_of(GetParam(), kOracle), "Qwen3.5 config " + GetParam());
}

INSTANTIATE_TEST_SUITE_P(Configs, Qwen3_5Parity, ::testing::Values("A", "B"));

// The export writes the names and tensors of transformers' state dict (config B holds exactly
// those) and a config.json that loads back as Qwen3.5 with the same logits.
TEST(Qwen3_5Model, TheExportWritesTransformersNamesAndLoadsBack) {
  auto model = load("B");
  expect_export_writes_the_source(model, model_dir("B", kOracle), temp_dir("qwen3_5_export"), *cases_of("B", kOracle),
                                  "qwen3_5");
}

// Published Qwen3.5 checkpoints carry a multi-token-prediction head (mtp.*) beside the model; it
// loads without it, as transformers' Qwen3_5ForConditionalGeneration does, and computes the same.
TEST(Qwen3_5Model, ACheckpointWithAnMtpHeadLoads) {
  const auto dir = temp_dir("qwen3_5_mtp");
  const auto source = model_dir("B", kOracle);
  for (const auto* file : {"config.json", "generation_config.json"})
    std::filesystem::copy_file(source / file, dir / file, std::filesystem::copy_options::overwrite_existing);
  const auto checkpoint = Checkpoint::open(source);
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& name : checkpoint.names()) tensors.emplace_back(name, checkpoint.tensor(name));
  tensors.emplace_back("mtp.fc.weight", torch::randn({96, 192}));
  tensors.emplace_back("mtp.layers.0.input_layernorm.weight", torch::zeros({96}));
  save_safetensors(dir / "model.safetensors", tensors);
  auto with_mtp = QwenVLForConditionalGenerationImpl::from_pretrained(dir);
  auto plain = load("B");
  torch::NoGradGuard no_grad;
  const auto in = inputs_of(*cases_of("B", kOracle), "image");
  EXPECT_TRUE(torch::equal(with_mtp->forward(in), plain->forward(in)));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mm::testing
