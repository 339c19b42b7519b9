// The umT5 text encoder (Wan's) against transformers' UMT5EncoderModel on tiny random weights:
// hidden states within 1e-4 (fp32) with and without padding, sequences longer than the
// relative-attention max distance, gated and ungated feed-forwards; T5's relative position
// buckets equal for every distance; broken configs and checkpoints refused by name.
#include <fstream>

#include "mm/core/safetensors.h"
#include "mm/core/json_config.h"
#include "mm/models/umt5/umt5.h"
#include "testing.h"

namespace mm {
namespace {

namespace fs = std::filesystem;
using testing::golden_dir;
using testing::max_abs_diff;

class UMT5Encoder : public ::testing::TestWithParam<std::string> {};

TEST_P(UMT5Encoder, HiddenStatesMatchTransformers) {
  const auto dir = golden_dir("umt5_encoder") / GetParam();
  auto model = UMT5EncoderModelImpl::from_pretrained(dir);
  const auto cases = Checkpoint::open(dir / "cases.safetensors");
  torch::NoGradGuard no_grad;
  int i = 0;
  for (; cases.contains("case" + std::to_string(i) + ".out"); ++i) {
    const std::string c = "case" + std::to_string(i);
    const auto out = model->forward(cases.tensor(c + ".input_ids"), cases.tensor(c + ".attention_mask"));
    const auto expected = cases.tensor(c + ".out");
    // Padding positions carry values in both (they attend to the real tokens); all are compared.
    const double diff = max_abs_diff(out, expected);
    EXPECT_LT(diff, 1e-4) << c;
    std::cout << GetParam() << " " << c << ": max |ours - transformers| = " << diff << " (outputs up to "
              << expected.abs().max().item<double>() << ")\n";
  }
  EXPECT_EQ(i, 3) << "cases in the golden";
}

TEST_P(UMT5Encoder, RelativePositionBucketsMatchTransformers) {
  const auto dir = golden_dir("umt5_encoder") / GetParam();
  const auto config = UMT5Config::from_file(dir / "config.json");
  const auto cases = Checkpoint::open(dir / "cases.safetensors");
  const auto ids = umt5_relative_position_buckets(cases.tensor("buckets.relative"), config.relative_attention_num_buckets,
                                                  config.relative_attention_max_distance);
  EXPECT_TRUE(torch::equal(ids, cases.tensor("buckets.ids")));
}

INSTANTIATE_TEST_SUITE_P(Configs, UMT5Encoder, ::testing::Values("a", "b"));

TEST(UMT5EncoderErrors, WithoutPaddingEqualsAllOnesMask) {
  auto model = UMT5EncoderModelImpl::from_pretrained(golden_dir("umt5_encoder") / "a");
  torch::NoGradGuard no_grad;
  const auto ids = torch::randint(2, 100, {2, 9}, torch::kLong);
  EXPECT_LT(max_abs_diff(model->forward(ids), model->forward(ids, torch::ones({2, 9}, torch::kLong))), 1e-6);
  EXPECT_THROW_MSG(model->forward(ids, torch::ones({2, 8}, torch::kLong)), "attention_mask must be [batch, seq]");
}

TEST(UMT5EncoderErrors, BadConfigsAndCheckpointsAreNamed) {
  const auto dir = testing::temp_dir("umt5_bad");
  const auto source = golden_dir("umt5_encoder") / "a";
  auto config = read_json_file(source / "config.json");

  auto write = [&](const std::string& name, const nlohmann::json& json) {
    fs::create_directories(dir / name);
    std::ofstream(dir / name / "config.json") << json.dump();
    fs::copy_file(source / "model.safetensors", dir / name / "model.safetensors", fs::copy_options::overwrite_existing);
    return dir / name;
  };
  auto t5 = config;
  t5["model_type"] = "t5";
  EXPECT_THROW_MSG(UMT5EncoderModelImpl::from_pretrained(write("t5", t5)), "model_type: 't5' is not a umT5");
  auto act = config;
  act["feed_forward_proj"] = "gated-swish";
  EXPECT_THROW_MSG(UMT5EncoderModelImpl::from_pretrained(write("act", act)), "feed_forward_proj='gated-swish'");
  auto layers = config;
  layers["num_layers"] = 4;  // the checkpoint has 3
  EXPECT_THROW_MSG(UMT5EncoderModelImpl::from_pretrained(write("layers", layers)),
                   "missing: encoder.block.3.layer.0.SelfAttention");
  layers["num_layers"] = 1000000000;  // bounded by memory before anything is built
  EXPECT_THROW_MSG(UMT5EncoderModelImpl::from_pretrained(write("huge", layers)), "num_layers (1000000000) x a layer");
  auto heads = config;
  heads["d_kv"] = 4;
  EXPECT_THROW_MSG(UMT5EncoderModelImpl::from_pretrained(write("heads", heads)), "wrong shape");
}

}  // namespace
}  // namespace mm
