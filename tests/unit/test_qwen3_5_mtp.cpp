// Qwen3.5's multi-token-prediction head (models/qwen2/multi_token_prediction.h) around its training
// parity (test_train_parity, families qwen3_5_mtp and qwen3_5_moe_mtp, against transformers' layers
// wired as vLLM wires the head): it loads for training and only for training, the export keeps it,
// configs that do not match the checkpoint are refused or loaded without it as they should, each
// depth's targets stay inside their sample, and a packed row gives the loss and gradients of its
// samples run alone (fp64, within 1e-9), the head included.
#include <fstream>

#include "mm/core/json_config.h"
#include "mm/core/safetensors.h"
#include "mm/models/qwen_vl/qwen_vl_hf_export.h"
#include "mm/nn/weights.h"
#include "mm/tasks/vlm_step.h"
#include "testing.h"

namespace mm::testing {
namespace {

namespace fs = std::filesystem;

// The oracle's Qwen3.5 checkpoints with a head (dense, 1 depth; MoE, 2 depths) and without one.
fs::path model_with_head(const std::string& family = "qwen3_5_mtp") {
  return golden_dir("train_parity") / family / "model";
}

// A copy of `source` whose config.json text_config is edited by `edit`.
fs::path edited_copy(const fs::path& source, const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  const auto dir = temp_dir(name);
  for (const auto& entry : fs::directory_iterator(source))
    fs::copy_file(entry.path(), dir / entry.path().filename(), fs::copy_options::overwrite_existing);
  auto config = read_json_file(dir / "config.json");
  edit(config["text_config"]);
  std::ofstream(dir / "config.json") << config.dump(2);
  return dir;
}

QwenVLForConditionalGeneration load(const fs::path& dir, bool with_mtp, torch::Dtype dtype = torch::kFloat32) {
  return QwenVLForConditionalGenerationImpl::from_pretrained(dir, dtype, c10::kCPU, with_mtp);
}

TEST(Qwen3_5Mtp, TheHeadLoadsForTrainingOnlyWithTheCheckpointsTensors) {
  EXPECT_FALSE(load(model_with_head(), /*with_mtp=*/false)->mtp) << "inference must not carry the head";
  auto model = load(model_with_head(), true);
  ASSERT_TRUE(model->mtp);
  EXPECT_EQ(model->mtp->depths(), 1);
  EXPECT_EQ(load(model_with_head("qwen3_5_moe_mtp"), true)->mtp->depths(), 2);
  const auto checkpoint = Checkpoint::open(model_with_head());
  int64_t compared = 0;
  for (const auto& [name, tensor] : named_weights(*model->mtp)) {
    ASSERT_TRUE(checkpoint.contains("mtp." + name)) << name;
    EXPECT_TRUE(torch::equal(tensor, checkpoint.tensor("mtp." + name))) << name;
    ++compared;
  }
  int64_t in_checkpoint = 0;
  for (const auto& name : checkpoint.names()) in_checkpoint += name.rfind("mtp.", 0) == 0;
  EXPECT_EQ(compared, in_checkpoint);
}

TEST(Qwen3_5Mtp, TheExportKeepsTheHead) {
  auto model = load(model_with_head(), true);
  const auto out = temp_dir("qwen3_5_mtp_export") / "hf";
  export_hf(model, model_with_head(), out);
  const auto source = Checkpoint::open(model_with_head());
  const auto exported = Checkpoint::open(out);
  for (const auto& name : source.names())
    if (name.rfind("mtp.", 0) == 0) {
      ASSERT_TRUE(exported.contains(name)) << name;
      EXPECT_TRUE(torch::equal(exported.tensor(name), source.tensor(name))) << name;
    }
  EXPECT_EQ(read_json_file(out / "config.json")["text_config"]["mtp_num_hidden_layers"], 1);
  EXPECT_EQ(load(out, true)->mtp->depths(), 1);
}

// transformers' save_pretrained drops mtp.* but keeps the config key: such a directory trains
// without a head rather than failing on missing tensors.
TEST(Qwen3_5Mtp, AConfigNamingAHeadTheCheckpointLacksLoadsWithoutIt) {
  const auto dir = edited_copy(golden_dir("train_parity") / "qwen3_5" / "model", "qwen3_5_mtp_no_tensors",
                               [](nlohmann::json& text) { text["mtp_num_hidden_layers"] = 1; });
  auto model = load(dir, true);
  EXPECT_FALSE(model->mtp);
  EXPECT_EQ(vlm_mtp_loss_weight(*model, 0.5), 0.0);
}

TEST(Qwen3_5Mtp, ConfigsTheCheckpointCannotFillAreRefusedNamingTheKey) {
  const auto deeper = edited_copy(model_with_head(), "qwen3_5_mtp_deeper",
                                  [](nlohmann::json& text) { text["mtp_num_hidden_layers"] = 2; });
  EXPECT_THROW_MSG(load(deeper, true), "text_config.mtp_num_hidden_layers is 2, but the checkpoint in");
  EXPECT_FALSE(load(deeper, false)->mtp);  // inference never reads the head
  const auto dedicated = edited_copy(model_with_head(), "qwen3_5_mtp_dedicated",
                                     [](nlohmann::json& text) { text["mtp_use_dedicated_embeddings"] = true; });
  EXPECT_THROW_MSG(load(dedicated, true), "text_config.mtp_use_dedicated_embeddings is true");
  const auto negative = edited_copy(model_with_head(), "qwen3_5_mtp_negative",
                                    [](nlohmann::json& text) { text["mtp_num_hidden_layers"] = -1; });
  EXPECT_THROW_MSG(load(negative, true), "mtp_num_hidden_layers: must be within 0..16, got -1");
}

// Depth k at position p reads token p + k and predicts token p + k + 1, i.e. what targets[p + k]
// names: only inside p's own sample, never at padding.
TEST(Qwen3_5Mtp, EachDepthsTargetsStayInsideTheirSample) {
  TrainBatch packed;
  packed.inputs.input_ids = torch::zeros({1, 7}, torch::kInt64);
  packed.targets = torch::tensor({11, 12, -100, 21, 22, 23, -100}, torch::kInt64).view({1, 7});
  packed.cu_seqlens = {0, 3, 7};
  EXPECT_TRUE(torch::equal(multi_token_positions(packed, 1),
                           torch::tensor({1, 1, 0, 1, 1, 1, 0}, torch::kInt64).to(torch::kBool).view({1, 7})));
  EXPECT_TRUE(torch::equal(multi_token_targets(packed, 1),
                           torch::tensor({12, -100, -100, 22, 23, -100, -100}, torch::kInt64).view({1, 7})));
  EXPECT_TRUE(torch::equal(multi_token_targets(packed, 2),
                           torch::tensor({-100, -100, -100, 23, -100, -100, -100}, torch::kInt64).view({1, 7})));
  EXPECT_TRUE(torch::equal(multi_token_targets(packed, 7), torch::full({1, 7}, -100, torch::kInt64)));
  TrainBatch padded;  // left padding too: a padded position predicts nothing
  padded.inputs.input_ids = torch::zeros({2, 4}, torch::kInt64);
  padded.inputs.attention_mask = torch::tensor({1, 1, 1, 0, 0, 1, 1, 1}, torch::kInt64).view({2, 4});
  padded.targets = torch::tensor({31, 32, -100, -100, -100, 41, 42, -100}, torch::kInt64).view({2, 4});
  EXPECT_TRUE(torch::equal(multi_token_targets(padded, 1),
                           torch::tensor({32, -100, -100, -100, -100, 42, -100, -100}, torch::kInt64).view({2, 4})));
}

// The oracle's training samples 0..3 (different lengths, one image each).
std::vector<TrainSample> four_samples(const QwenVLConfig& config) {
  auto file = Checkpoint::open(golden_dir("train_parity") / "qwen3_5_mtp" / "samples.safetensors");
  std::vector<TrainSample> samples;
  for (int64_t k = 0; k < 4; ++k) {
    const auto key = std::to_string(k) + ".";
    TrainSample s;
    s.index = k;
    s.input_ids = file.tensor(key + "input_ids").clone();
    s.targets = file.tensor(key + "targets").clone();
    s.pixel_values = file.tensor(key + "pixel_values").clone().to(torch::kFloat64);
    s.image_grid_thw = file.tensor(key + "image_grid_thw").clone();
    QwenVLInputs inputs;
    inputs.input_ids = s.input_ids.unsqueeze(0);
    inputs.image_grid_thw = s.image_grid_thw;
    s.position_ids = qwen_vl_rope_index(config, inputs).position_ids.squeeze(1);
    samples.push_back(std::move(s));
  }
  return samples;
}

// The loss (with the head's term) and every gradient of `batches` summed.
std::pair<double, std::vector<torch::Tensor>> loss_and_gradients(QwenVLForConditionalGeneration& model,
                                                                 const std::vector<TrainBatch>& batches) {
  model->zero_grad();
  double loss = 0;
  for (const auto& batch : batches) {
    auto sum = vlm_loss_sum(model, batch, VlmLossWeights{0, 0.5});
    sum.backward();
    loss += sum.item<double>();
  }
  std::vector<torch::Tensor> grads;
  for (const auto& p : model->parameters()) grads.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  return {loss, grads};
}

class Qwen3_5MtpPacking : public ::testing::TestWithParam<std::string> {};

TEST_P(Qwen3_5MtpPacking, APackedRowGivesItsSamplesLossAndGradientsAlone) {
  auto model = load(model_with_head(GetParam()), true, torch::kFloat64);
  model->train();
  const auto samples = four_samples(model->config());
  const auto [packed_loss, packed_grads] = loss_and_gradients(model, {collate_packed(samples)});
  std::vector<TrainBatch> alone;
  for (const auto& s : samples) alone.push_back(collate_packed({s}));
  const auto [alone_loss, alone_grads] = loss_and_gradients(model, alone);
  // Without the head's term the loss would be smaller: the term is there and counted once.
  auto no_head = vlm_loss_sum(model, collate_packed(samples)).item<double>();
  EXPECT_GT(packed_loss - no_head, 0.05 * packed_loss);
  EXPECT_NEAR(packed_loss, alone_loss, 1e-9 * alone_loss);
  const auto names = model->named_parameters();
  double head_gradient = 0;
  for (size_t i = 0; i < packed_grads.size(); ++i) {
    const double scale = std::max(alone_grads[i].abs().max().item<double>(), 1e-30);
    EXPECT_LT(max_abs_diff(packed_grads[i], alone_grads[i]) / scale, 1e-9) << names[i].key();
    if (names[i].key().rfind("mtp.", 0) == 0) head_gradient += packed_grads[i].abs().sum().item<double>();
  }
  EXPECT_GT(head_gradient, 0.0) << "the head's loss must reach its parameters";
}

INSTANTIATE_TEST_SUITE_P(Families, Qwen3_5MtpPacking, ::testing::Values("qwen3_5_mtp", "qwen3_5_moe_mtp"));

}  // namespace
}  // namespace mm::testing
