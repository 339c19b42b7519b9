// KV-cache generation against transformers' generate: 32 greedy tokens identical for every case
// and config (left-padded batch included), stop tokens, the logits warpers (temperature, top-k,
// top-p) equal to the reference's processors, and seeded sampling.
#include "mm/tasks/generation.h"
#include "model_cases.h"

namespace mm::testing {
namespace {

using Model = QwenVLForConditionalGeneration;

Model load(const std::string& name) {
  return QwenVLForConditionalGenerationImpl::from_pretrained(model_dir(name), torch::kFloat32);
}

GenerationConfig sampling(double temperature, double top_p, int64_t top_k, uint64_t seed = 0,
                          int64_t max_new_tokens = 32) {
  GenerationConfig config;
  config.greedy = false;
  config.temperature = temperature;
  config.top_p = top_p;
  config.top_k = top_k;
  config.seed = seed;
  config.max_new_tokens = max_new_tokens;
  return config;
}

std::vector<int64_t> row(const torch::Tensor& t, int64_t r) {
  auto x = t[r].to(torch::kInt64).contiguous();
  return {x.data_ptr<int64_t>(), x.data_ptr<int64_t>() + x.numel()};
}

class GreedyParity : public ::testing::TestWithParam<std::string> {};

TEST_P(GreedyParity, ThirtyTwoTokensEqualTransformers) {
  auto model = load(GetParam());
  auto cases = cases_of(GetParam());
  // generation_config.json's eos (never produced by these prompts) replaces config.json's.
  EXPECT_EQ(model->config().eos_token_ids, std::vector<int64_t>{cases->tensor("eos_token_id").item<int64_t>()});
  GenerationConfig config;
  config.max_new_tokens = 32;
  for (const auto& c : kCases) {
    auto in = inputs_of(*cases, c);
    auto expected = field(*cases, c, "generated");
    auto got = generate_batch(model, in, config);
    ASSERT_EQ(static_cast<int64_t>(got.size()), expected.size(0)) << c;
    for (int64_t r = 0; r < expected.size(0); ++r) EXPECT_EQ(got[r], row(expected, r)) << c << " row " << r;
    std::cout << "[ greedy ] config " << GetParam() << ", " << c << ": " << expected.size(0) << " x "
              << expected.size(1) << " tokens, min top-2 margin " << field(*cases, c, "min_margin").item<float>()
              << std::endl;
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, GreedyParity, ::testing::Values("A", "B"));

TEST(Generation, StopsAfterTheFirstStopToken) {
  auto model = load("A");
  auto cases = cases_of("A");
  auto in = inputs_of(*cases, "image");
  GenerationConfig config;
  config.stop_token_ids = {cases->tensor("stop.stop_id").item<int64_t>()};
  auto expected = row(cases->tensor("stop.generated"), 0);
  EXPECT_LT(expected.size(), 32u);
  EXPECT_EQ(expected.back(), config.stop_token_ids[0]);
  EXPECT_EQ(generate(model, in, config), expected);
  config.stop_token_ids.clear();
  config.max_new_tokens = 3;
  auto greedy = row(field(*cases, "image", "generated"), 0);
  EXPECT_EQ(generate(model, in, config), std::vector<int64_t>(greedy.begin(), greedy.begin() + 3));
}

TEST(Generation, WarpersEqualTransformersProcessors) {
  auto warp = SafetensorsFile::open(golden_dir("qwen2_5_vl_model") / "warp.safetensors");
  auto logits = warp->tensor("logits").clone();
  auto check = [&](const std::string& key, GenerationConfig config) {
    config.greedy = false;
    auto got = warp_logits(logits, config);
    auto expected = warp->tensor(key);
    EXPECT_TRUE(torch::equal(torch::isinf(got), torch::isinf(expected))) << key;
    auto finite = torch::isfinite(expected);
    EXPECT_LE(max_abs_diff(got.index({finite}), expected.index({finite})), 1e-6) << key;
    EXPECT_GT(finite.sum().item<int64_t>(), 3) << key;  // a real filter, not a near-argmax
  };
  check("t07_k20_p08", sampling(0.7, 0.8, 20));
  check("p05", sampling(1.0, 0.5, 0));
  check("k5", sampling(1.0, 1.0, 5));
  check("t2", sampling(2.0, 1.0, 0));
}

TEST(Generation, SamplingIsSeededAndTopKOneIsGreedy) {
  auto model = load("B");
  auto cases = cases_of("B");
  auto in = inputs_of(*cases, "text");
  auto sample = sampling(1.3, 0.95, 50, /*seed=*/11, /*max_new_tokens=*/16);
  auto first = generate(model, in, sample);
  EXPECT_EQ(first.size(), 16u);
  EXPECT_EQ(generate(model, in, sample), first);
  GenerationConfig greedy;
  greedy.max_new_tokens = 16;
  auto argmax = generate(model, in, greedy);
  EXPECT_NE(first, argmax);  // sampling at temperature 1.3 leaves the greedy path
  sample.seed = 12;
  EXPECT_NE(generate(model, in, sample), first);
  auto top1 = sampling(0.8, 1.0, 1, /*seed=*/3, /*max_new_tokens=*/16);
  EXPECT_EQ(generate(model, in, top1), argmax);
}

TEST(Generation, BadConfigIsRejected) {
  auto model = load("A");
  auto in = inputs_of(*cases_of("A"), "text");
  EXPECT_THROW_MSG(generate(model, in, sampling(1.0, 1.0, 0, 0, /*max_new_tokens=*/0)), "max_new_tokens must be positive");
  EXPECT_THROW_MSG(generate(model, in, sampling(0.0, 1.0, 0)), "temperature must be positive");
  EXPECT_THROW_MSG(generate(model, in, sampling(1.0, 1.5, 0)), "top_p must be in (0, 1]");
  auto batch = inputs_of(*cases_of("A"), "batch");
  EXPECT_THROW_MSG(generate(model, batch, GenerationConfig()), "use generate_batch");
}

}  // namespace
}  // namespace mm::testing
