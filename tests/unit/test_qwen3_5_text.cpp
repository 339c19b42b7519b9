// Qwen3.5's hybrid decoder as a causal LM (the shared Qwen decoder with Gated DeltaNet layers from
// layer_types, gated attention, partial rotary and zero-centred norms) against transformers 5.17's
// Qwen3_5ForCausalLM in fp32 (tests/reference/qwen3_5_text.py), on two configs (the published
// three-DeltaNet-then-attention pattern with GQA and quarter rotary; alternating layers with
// biases, half rotary and tied embeddings): logits within 1e-4, loss and gradients within 1e-4
// relative on an unpadded batch, a left-padded batch and a 70-token row crossing the DeltaNet chunk;
// 32 greedy tokens through the KV and DeltaNet caches identical to generate. And a packed row of
// four samples gives their logits, summed losses and gradients as the samples run alone (fp64:
// within 1e-9; fp32: 1e-4).
#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/models/qwen3/qwen3_causal_lm.h"
#include "causal_lm_cases.h"
#include "test_files.h"
#include "testing.h"

namespace mm::testing {
namespace {

const std::string kOracle = "qwen3_5_text";

Qwen3ForCausalLM load(const std::string& name) {
  return Qwen3ForCausalLMImpl::from_pretrained(golden_dir(kOracle) / name);
}

std::shared_ptr<SafetensorsFile> cases_of(const std::string& name) { return causal_lm_cases(kOracle, name); }
torch::Tensor field(const SafetensorsFile& file, const std::string& key) { return case_field(file, key); }
Qwen3Inputs inputs_of(const SafetensorsFile& file, const std::string& c) { return causal_lm_inputs(file, c); }

class Qwen3_5Parity : public ::testing::TestWithParam<std::string> {};

TEST_P(Qwen3_5Parity, LogitsLossAndGradientsMatchTransformers) {
  auto model = load(GetParam());
  auto cases = cases_of(GetParam());
  for (const auto& c : {"batch", "padded", "long"}) {
    model->zero_grad();
    auto in = inputs_of(*cases, c);
    auto out = model->forward(in);
    // Padding positions carry no meaning: compared where the mask is 1.
    const auto real = in.attention_mask.defined() ? in.attention_mask.to(torch::kBool)
                                                  : torch::ones_like(in.input_ids, torch::kBool);
    const double logits = max_abs_diff(out.logits.index({real}), field(*cases, std::string(c) + ".logits").index({real}));
    const double loss = relative_diff(out.loss.detach().reshape(1), field(*cases, std::string(c) + ".loss"));
    EXPECT_LE(logits, 1e-4) << c;
    EXPECT_LE(loss, 1e-4) << c;
    out.loss.backward();
    const auto params = model->named_parameters();
    double grads = 0;
    for (const auto& name : grad_names(*cases)) {
      ASSERT_TRUE(params.contains(name)) << name;
      ASSERT_TRUE(params[name].grad().defined()) << name;
      const double d = relative_diff(params[name].grad(), field(*cases, std::string(c) + ".grad." + name));
      EXPECT_LE(d, 1e-4) << c << " " << name;
      grads = std::max(grads, d);
    }
    std::cout << "[ parity ] " << GetParam() << " " << c << ": logits " << logits << ", loss (rel) " << loss
              << ", gradients (rel) " << grads << std::endl;
  }
}

// The prefill runs the chunked DeltaNet form and the decode steps the recurrent one from the
// cached conv window and state, beside the attention layers' KV cache.
TEST_P(Qwen3_5Parity, ThirtyTwoGreedyTokensThroughBothCachesEqualGenerate) {
  auto model = load(GetParam());
  auto cases = cases_of(GetParam());
  for (const auto& c : {"batch", "padded"}) {
    auto in = inputs_of(*cases, c);
    auto got = model->generate_greedy(in.input_ids, in.attention_mask, 32);
    EXPECT_TRUE(torch::equal(got, field(*cases, std::string(c) + ".generated")))
        << c << "\n got " << got << "\n want " << field(*cases, std::string(c) + ".generated");
  }
}

// Four samples packed in one row (positions restarting; attention causal within each; the DeltaNet
// conv window and state restarting at each): the row's logits are the samples' alone, and its loss
// and gradients those of the samples' token-weighted losses. In fp64 they agree to rounding
// (within 1e-9), so any leak across a boundary shows (at the layer level a leaking conv window
// moved outputs by 8.6 and a leaking state by 0.06-0.3, test_gated_delta_net); in fp32, the
// training dtype, within 1e-4 relative (summation order: one GEMM over the row against four).
struct PackedVersusAlone {
  double logits = 0, grads = 0;
  std::string worst;  // the parameter whose gradient differs most
};

PackedVersusAlone packed_versus_alone(Qwen3ForCausalLM& model) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(11);
  const std::vector<int64_t> lengths = {5, 70, 1, 23};  // the 70 crosses a DeltaNet chunk
  int64_t targets = 0;
  for (const auto n : lengths) targets += n - 1;
  std::vector<torch::Tensor> ids, labels, positions, alone_logits;
  std::vector<int64_t> cu_seqlens = {0};
  model->zero_grad();
  for (const auto n : lengths) {
    auto sample = torch::randint(3, model->config().text.vocab_size, {1, n}, generator, torch::kInt64);
    Qwen3Inputs in;
    in.input_ids = sample;
    in.labels = sample;
    auto out = model->forward(in);
    alone_logits.push_back(out.logits[0].detach());
    // The loss is a mean over the sample's n - 1 targets; weighted to its share of the row's.
    if (n > 1) (out.loss * static_cast<double>(n - 1) / static_cast<double>(targets)).backward();
    ids.push_back(sample);
    auto sample_labels = sample.clone();
    sample_labels[0][0] = -100;  // in the row, the previous sample's last token must not predict it
    labels.push_back(sample_labels);
    positions.push_back(torch::arange(n, torch::kInt64).view({1, n}));
    cu_seqlens.push_back(cu_seqlens.back() + n);
  }
  std::map<std::string, torch::Tensor> alone_grads;
  for (const auto& p : model->named_parameters()) alone_grads[p.key()] = p.value().grad().clone();
  model->zero_grad();
  Qwen3Inputs packed;
  packed.input_ids = torch::cat(ids, 1);
  packed.labels = torch::cat(labels, 1);
  packed.position_ids = torch::cat(positions, 1);
  packed.cu_seqlens = cu_seqlens;
  auto out = model->forward(packed);
  out.loss.backward();
  PackedVersusAlone result;
  result.logits = relative_diff(out.logits[0], torch::cat(alone_logits, 0));
  for (const auto& p : model->named_parameters()) {
    const double d = relative_diff(p.value().grad(), alone_grads[p.key()]);
    if (d > result.grads) result.grads = d, result.worst = p.key();
  }
  return result;
}

TEST_P(Qwen3_5Parity, APackedRowGivesItsSamplesLogitsLossesAndGradients) {
  auto model = load(GetParam());
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    model->to(dtype);
    const auto r = packed_versus_alone(model);
    const double bound = dtype == torch::kFloat64 ? 1e-9 : 1e-4;
    std::cout << "[ packed ] " << GetParam() << " " << c10::toString(dtype) << ": logits (rel) " << r.logits
              << ", gradients (rel) " << r.grads << " (" << r.worst << ")" << std::endl;
    EXPECT_LE(r.logits, bound) << dtype;
    EXPECT_LE(r.grads, bound) << dtype << " " << r.worst;
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, Qwen3_5Parity, ::testing::Values("hybrid", "alternating"));

TEST(Qwen3_5Config, LayerTypesPartialRotaryAndTheLayersTheyBuild) {
  auto model = load("hybrid");
  const auto& text = model->config().text;
  EXPECT_EQ(text.layer_types, (std::vector<std::string>{"linear_attention", "linear_attention", "linear_attention",
                                                        "full_attention"}));
  EXPECT_EQ(text.rotary_dim(), 4);
  EXPECT_TRUE(text.attention_output_gate && text.zero_centered_norms && text.qk_norm);
  for (size_t i = 0; i < 4; ++i) {
    auto layer = model->model->layers->ptr<Qwen2DecoderLayerImpl>(i);
    EXPECT_EQ(static_cast<bool>(layer->linear_attn), i < 3) << i;
    EXPECT_EQ(static_cast<bool>(layer->self_attn), i == 3) << i;
  }
  EXPECT_EQ(load("alternating")->config().text.rotary_dim(), 16);
}

// Without layer_types, transformers' pattern: every full_attention_interval-th layer attends.
TEST(Qwen3_5Config, TheIntervalPatternLegacyNamesAndErrors) {
  const auto dir = temp_dir("qwen3_5_config");
  auto json = read_json_file(golden_dir(kOracle) / "hybrid" / "config.json");
  auto read = [&](const nlohmann::json& j) {
    write_file_atomic(dir / "config.json", j.dump());
    return Qwen3Config::from_file(dir / "config.json");
  };
  auto pattern = json;
  pattern.erase("layer_types");
  pattern["full_attention_interval"] = 2;
  EXPECT_EQ(read(pattern).text.layer_types, (std::vector<std::string>{"linear_attention", "full_attention",
                                                                     "linear_attention", "full_attention"}));
  auto legacy = json;
  legacy["layer_types"] = {"mamba", "attention", "mamba", "attention"};
  EXPECT_EQ(read(legacy).text.layer_types, read(pattern).text.layer_types);
  auto expect_error = [&](const nlohmann::json& j, const std::string& needle) {
    try {
      read(j);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto short_types = json;
  short_types["layer_types"] = {"linear_attention", "full_attention"};
  expect_error(short_types, "layer_types has 2 entries for num_hidden_layers 4");
  auto unknown = json;
  unknown["layer_types"][1] = "sliding_attention";
  expect_error(unknown, "layer_types[1] 'sliding_attention' is not supported");
  auto heads = json;
  heads["linear_num_value_heads"] = 3;
  expect_error(heads, "linear_num_value_heads (3) must be a multiple of linear_num_key_heads (2)");
  auto rotary = json;
  rotary["rope_parameters"]["partial_rotary_factor"] = 0.1;  // 1.6 dims of 16
  expect_error(rotary, "must be even and positive");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mm::testing
