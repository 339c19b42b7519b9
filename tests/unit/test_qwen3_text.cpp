// Qwen3 and Qwen3-MoE causal LMs against transformers 5.17 in fp32 (tests/reference/qwen3_text.py):
// for two dense configs (GQA with an untied head; head_dim != hidden / heads with tied embeddings
// and attention biases) and two MoE configs (renormalised top-k with dense layers from
// mlp_only_layers and decoder_sparse_step; plain top-k), on an unpadded and a left-padded batch:
// logits within 1e-4, router logits within 1e-5, aux loss within 1e-6, loss and gradients within
// 1e-4 relative, 16 greedy tokens with the KV cache identical to generate. And a packed row of
// three samples equals the samples run alone.
#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/models/qwen3/qwen3_causal_lm.h"
#include "mm/nn/moe.h"
#include "mm/train/recompute.h"
#include "causal_lm_cases.h"
#include "test_files.h"
#include "testing.h"

namespace mm::testing {
namespace {

const std::string kOracle = "qwen3_text";

Qwen3ForCausalLM load(const std::string& name) {
  return Qwen3ForCausalLMImpl::from_pretrained(golden_dir(kOracle) / name);
}

std::shared_ptr<SafetensorsFile> cases_of(const std::string& name) { return causal_lm_cases(kOracle, name); }
torch::Tensor field(const SafetensorsFile& file, const std::string& key) { return case_field(file, key); }
Qwen3Inputs inputs_of(const SafetensorsFile& file, const std::string& c) { return causal_lm_inputs(file, c); }

const std::vector<std::string> kCases = {"batch", "padded"};

class Qwen3Parity : public ::testing::TestWithParam<std::string> {};

TEST_P(Qwen3Parity, LogitsLossRouterAndGradientsMatchTransformers) {
  auto model = load(GetParam());
  model->set_output_router_logits(true);  // as the oracle's forward
  auto cases = cases_of(GetParam());
  for (const auto& c : kCases) {
    model->zero_grad();
    auto in = inputs_of(*cases, c);
    auto out = model->forward(in);
    // Padding positions carry no meaning (their attention differs): compared where the mask is 1.
    const auto real = in.attention_mask.defined() ? in.attention_mask.to(torch::kBool)
                                                  : torch::ones_like(in.input_ids, torch::kBool);
    const double logits = max_abs_diff(out.logits.index({real}), field(*cases, c + ".logits").index({real}));
    const double loss = relative_diff(out.loss.detach().reshape(1), field(*cases, c + ".loss"));
    std::cout << "[ parity ] " << GetParam() << " " << c << ": logits " << logits << ", loss (rel) " << loss;
    EXPECT_LE(logits, 1e-4) << c;
    EXPECT_LE(loss, 1e-4) << c;
    if (model->config().is_moe()) {
      size_t layer = 0;
      double router = 0;
      for (; cases->contains(c + ".router_logits." + std::to_string(layer)); ++layer) {
        ASSERT_LT(layer, out.router_logits.size()) << c;
        const auto flat = real.reshape(-1);
        router = std::max(router, max_abs_diff(out.router_logits[layer].index({flat}),
                                               field(*cases, c + ".router_logits." + std::to_string(layer)).index({flat})));
      }
      EXPECT_EQ(layer, out.router_logits.size()) << c;
      const double aux = max_abs_diff(out.aux_loss.reshape(1), field(*cases, c + ".aux_loss"));
      std::cout << ", router logits " << router << ", aux loss " << aux;
      EXPECT_LE(router, 1e-5) << c;
      EXPECT_LE(aux, 1e-6) << c;
    } else {
      EXPECT_TRUE(out.router_logits.empty());
      EXPECT_FALSE(out.aux_loss.defined());
    }
    out.loss.backward();
    const auto params = model->named_parameters();
    double grads = 0;
    for (const auto& name : grad_names(*cases)) {
      ASSERT_TRUE(params.contains(name)) << name;
      const double d = relative_diff(params[name].grad(), field(*cases, c + ".grad." + name));
      EXPECT_LE(d, 1e-4) << c << " " << name;
      grads = std::max(grads, d);
    }
    std::cout << ", gradients (rel) " << grads << std::endl;
  }
}

TEST_P(Qwen3Parity, SixteenGreedyTokensWithTheCacheEqualGenerate) {
  auto model = load(GetParam());
  auto cases = cases_of(GetParam());
  for (const auto& c : kCases) {
    auto in = inputs_of(*cases, c);
    auto got = model->generate_greedy(in.input_ids, in.attention_mask, 16);
    EXPECT_TRUE(torch::equal(got, field(*cases, c + ".generated")))
        << c << "\n got " << got << "\n want " << field(*cases, c + ".generated");
  }
}

// Three samples packed in one row (positions restarting, attention causal within each) give
// each sample's logits (and router logits) as when it runs alone.
TEST_P(Qwen3Parity, APackedRowEqualsTheSamplesAlone) {
  auto model = load(GetParam());
  torch::NoGradGuard no_grad;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(11);
  const std::vector<int64_t> lengths = {5, 7, 4};
  std::vector<torch::Tensor> ids, positions, alone_logits, alone_router;
  std::vector<int64_t> cu_seqlens = {0};
  for (const auto n : lengths) {
    auto sample = torch::randint(3, model->config().text.vocab_size, {1, n}, generator, torch::kInt64);
    Qwen3Inputs in;
    in.input_ids = sample;
    auto out = model->forward(in);
    alone_logits.push_back(out.logits[0]);
    if (!out.router_logits.empty()) alone_router.push_back(out.router_logits[0]);
    ids.push_back(sample);
    positions.push_back(torch::arange(n, torch::kInt64).view({1, n}));
    cu_seqlens.push_back(cu_seqlens.back() + n);
  }
  Qwen3Inputs packed;
  packed.input_ids = torch::cat(ids, 1);
  packed.position_ids = torch::cat(positions, 1);
  packed.cu_seqlens = cu_seqlens;
  auto out = model->forward(packed);
  const double logits = max_abs_diff(out.logits[0], torch::cat(alone_logits, 0));
  std::cout << "[ packed ] " << GetParam() << ": logits " << logits;
  EXPECT_LE(logits, 1e-5);
  if (!alone_router.empty()) {
    const double router = max_abs_diff(out.router_logits[0], torch::cat(alone_router, 0));
    std::cout << ", first sparse layer's router logits " << router;
    EXPECT_LE(router, 1e-5);
  }
  std::cout << std::endl;
}

INSTANTIATE_TEST_SUITE_P(Configs, Qwen3Parity,
                         ::testing::Values("dense_gqa", "dense_headdim", "moe_norm", "moe_plain"));

TEST(Qwen3Config, SparseLayersFollowMlpOnlyLayersAndTheSparseStep) {
  auto model = load("moe_norm");  // 4 layers, mlp_only_layers [0], decoder_sparse_step 2
  std::vector<bool> sparse;
  for (size_t i = 0; i < model->model->layers->size(); ++i)
    sparse.push_back(static_cast<bool>(model->model->layers->ptr<Qwen2DecoderLayerImpl>(i)->moe));
  EXPECT_EQ(sparse, (std::vector<bool>{false, true, false, true}));
  EXPECT_EQ(model->config().text.moe.num_experts, 6);  // saved as num_local_experts by transformers 5.17
  // What save_pretrained wrote is the hub's per-expert layout, so loading it covers both.
  for (const auto* name : {"moe_norm", "moe_plain"})
    EXPECT_EQ(read_file(golden_dir(kOracle) / name / "saved_layout.txt"), "per_expert\n") << name;
  EXPECT_EQ(load("dense_headdim")->config().text.head_dim(), 24);
}

TEST(Qwen3Config, ErrorsNameTheFileAndKey) {
  const auto dir = temp_dir("qwen3_config");
  auto json = read_json_file(golden_dir(kOracle) / "moe_norm" / "config.json");
  json.erase("num_experts_per_tok");
  write_file_atomic(dir / "config.json", json.dump());
  try {
    Qwen3Config::from_file(dir / "config.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config.json: num_experts_per_tok"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// A checkpoint that lacks one expert's weight fails the load and names the tensor.
TEST(Qwen3Loading, AMissingExpertTensorIsNamed) {
  const auto dir = temp_dir("qwen3_missing_expert");
  const auto source = golden_dir(kOracle) / "moe_plain";
  std::filesystem::copy_file(source / "config.json", dir / "config.json");
  const auto checkpoint = Checkpoint::open(source);
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& name : checkpoint.names())
    if (name != "model.layers.2.mlp.experts.4.up_proj.weight") tensors.emplace_back(name, checkpoint.tensor(name));
  save_safetensors(dir / "model.safetensors", tensors);
  try {
    Qwen3ForCausalLMImpl::from_pretrained(dir);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing: model.layers.2.mlp.experts.4.up_proj.weight"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

// Recomputed blocks keep no router gradients, so the aux loss refuses them rather than train nothing.
TEST(Qwen3Loading, TheAuxLossRefusesARecomputingRunner) {
  auto model = load("moe_plain");
  model->set_output_router_logits(true);
  model->model->block_runner = recompute_runner();
  auto in = inputs_of(*cases_of("moe_plain"), "batch");
  EXPECT_THROW(model->forward(in), Error);
  model->set_output_router_logits(false);  // the language loss alone recomputes fine
  EXPECT_TRUE(model->forward(in).loss.requires_grad());
}

// The loss with no padding equals the masked path with a mask of ones (transformers' two branches).
TEST(LoadBalancingLoss, AMaskOfOnesEqualsNoMask) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(3);
  std::vector<torch::Tensor> logits = {torch::randn({10, 6}, generator), torch::randn({10, 6}, generator)};
  auto plain = load_balancing_loss(logits, 6, 2);
  auto masked = load_balancing_loss(logits, 6, 2, torch::ones({2, 5}, torch::kInt64));
  EXPECT_NEAR(plain.item<double>(), masked.item<double>(), 1e-6);
  EXPECT_EQ(load_balancing_loss({}, 6, 2).item<double>(), 0.0);
}

}  // namespace
}  // namespace mm::testing
