// Gated DeltaNet (Qwen3.5's linear-attention layer) against transformers 5.17's
// Qwen3_5GatedDeltaNet (tests/reference/gated_delta_net.py), fp32, two configs (as many value
// heads as key heads with a kernel of 4; key heads repeated for twice as many value heads with
// head sizes apart and a kernel of 3):
//   - a [2, 70] batch (across the 64-token chunk): outputs within 1e-4, input and parameter
//     gradients within 1e-4 relative;
//   - in bf16, an error against the fp32 output no larger than transformers' bf16 layer's;
//   - a left-padded row equals transformers' masked forward;
//   - prefill, six single-token recurrent steps and a chunk from the cache equal transformers'
//     DynamicCache decode;
//   - a packed row of five samples (cu_seqlens) equals transformers running them one by one,
//     and our own one-by-one runs in fp64 within 1e-9 relative (outputs and gradients); run as one
//     sample, the same row differs by far more, so a conv window or a state that crossed a sample boundary
//     would fail these tests.
// And the three forms of the delta rule agree over every length 1..300, chunk boundaries and
// carried states included.
#include <nlohmann/json.hpp>

#include <fstream>

#include "mm/core/error.h"
#include "mm/nn/gated_delta_net.h"
#include "mm/nn/gated_delta_rule.h"
#include "mm/nn/weights.h"
#include "testing.h"

namespace mm::testing {
namespace {

const std::string kOracle = "gated_delta_net";

struct Golden {
  std::shared_ptr<SafetensorsFile> file;
  torch::Tensor operator[](const std::string& key) const { return file->tensor(key).clone(); }
};

GatedDeltaNetOptions options_of(const std::string& name) {
  std::ifstream in(golden_dir(kOracle) / (name + ".json"));
  const auto j = nlohmann::json::parse(in);
  GatedDeltaNetOptions o;
  o.hidden_size = j.at("hidden_size");
  o.num_key_heads = j.at("linear_num_key_heads");
  o.num_value_heads = j.at("linear_num_value_heads");
  o.key_head_dim = j.at("linear_key_head_dim");
  o.value_head_dim = j.at("linear_value_head_dim");
  o.conv_kernel = j.at("linear_conv_kernel_dim");
  o.eps = j.at("rms_norm_eps");
  o.activation = j.at("hidden_act");
  return o;
}

std::pair<GatedDeltaNet, Golden> load(const std::string& name) {
  Golden golden{SafetensorsFile::open(golden_dir(kOracle) / (name + ".safetensors"))};
  GatedDeltaNet layer(options_of(name));
  std::vector<std::pair<std::string, torch::Tensor>> weights;
  for (const auto& key : golden.file->names())
    if (key.rfind("weight.", 0) == 0) weights.emplace_back(key.substr(7), golden[key]);
  load_weights(*layer, weights, name);
  return {layer, golden};
}

double relative_diff(const torch::Tensor& got, const torch::Tensor& want) {
  return max_abs_diff(got, want) / std::max(want.abs().max().item<double>(), 1e-12);
}

std::vector<int64_t> host_ints(const torch::Tensor& t) {
  auto c = t.to(torch::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

// Every parameter's gradient against the golden's PREFIX.grad.NAME, then cleared.
void expect_parameter_grads(GatedDeltaNet& layer, const Golden& golden, const std::string& prefix, double tol) {
  for (auto& p : layer->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_LT(relative_diff(p.value().grad(), golden[prefix + ".grad." + p.key()]), tol) << prefix << " " << p.key();
    p.value().mutable_grad() = torch::Tensor();
  }
}

class GatedDeltaNetParity : public ::testing::TestWithParam<std::string> {};

TEST_P(GatedDeltaNetParity, ForwardAndGradientsMatchTransformers) {
  auto [layer, golden] = load(GetParam());
  auto x = golden["plain.x"].requires_grad_();
  auto out = layer->forward(x);
  EXPECT_LT(max_abs_diff(out, golden["plain.out"]), 1e-4);
  (out * golden["plain.r"]).sum().backward();
  EXPECT_LT(relative_diff(x.grad(), golden["plain.grad_x"]), 1e-4);
  expect_parameter_grads(layer, golden, "plain", 1e-4);
}

// In bf16 the layer rounds no worse than transformers' bf16 layer does, both measured against
// the fp32 output: the same tensors stay fp32 (the delta rule, the decay, the norm's statistics).
TEST_P(GatedDeltaNetParity, Bf16RoundsNoWorseThanTransformers) {
  auto [layer, golden] = load(GetParam());
  torch::NoGradGuard no_grad;
  layer->to(torch::kBFloat16);
  auto ours = layer->forward(golden["plain.x"].to(torch::kBFloat16)).to(torch::kFloat32);
  const auto reference = golden["plain.out"];
  const double our_error = max_abs_diff(ours, reference);
  const double their_error = max_abs_diff(golden["plain.out_bf16"], reference);
  std::cout << GetParam() << ": bf16 max error against fp32, mmtrain " << our_error << ", transformers "
            << their_error << "\n";
  EXPECT_LE(our_error, their_error * 1.05) << "mmtrain bf16 error " << our_error << ", transformers' " << their_error;
}

TEST_P(GatedDeltaNetParity, LeftPaddingIsMaskedAsTransformersMasksIt) {
  auto [layer, golden] = load(GetParam());
  torch::NoGradGuard no_grad;
  auto out = layer->forward(golden["mask.x"], golden["mask.attention_mask"]);
  EXPECT_LT(max_abs_diff(out, golden["mask.out"]), 1e-4);
}

TEST_P(GatedDeltaNetParity, CachedDecodeMatchesTransformersCache) {
  auto [layer, golden] = load(GetParam());
  torch::NoGradGuard no_grad;
  auto x = golden["decode.x"];
  DeltaNetCache cache;
  std::vector<torch::Tensor> pieces = {layer->forward(x.narrow(1, 0, 37), {}, {}, &cache)};
  for (int64_t t = 37; t < 43; ++t) pieces.push_back(layer->forward(x.narrow(1, t, 1), {}, {}, &cache));
  pieces.push_back(layer->forward(x.narrow(1, 43, 23), {}, {}, &cache));
  EXPECT_LT(max_abs_diff(torch::cat(pieces, 1), golden["decode.out"]), 1e-4);
  const auto& o = layer->options();
  EXPECT_EQ(cache.conv.sizes(), torch::IntArrayRef({2, o.conv_dim(), o.conv_kernel - 1}));
  EXPECT_EQ(cache.recurrent.sizes(), torch::IntArrayRef({2, o.num_value_heads, o.key_head_dim, o.value_head_dim}));
}

TEST_P(GatedDeltaNetParity, PackedRowEqualsItsSamplesAlone) {
  auto [layer, golden] = load(GetParam());
  const auto cu = host_ints(golden["alone.cu_seqlens"]);
  auto x = golden["alone.x"].requires_grad_();
  auto r = golden["alone.r"];
  auto packed = layer->forward(x, {}, cu);
  EXPECT_LT(max_abs_diff(packed, golden["alone.out"]), 1e-4);
  (packed * r).sum().backward();
  EXPECT_LT(relative_diff(x.grad(), golden["alone.grad_x"]), 1e-4);
  std::map<std::string, torch::Tensor> packed_grads;
  for (auto& p : layer->named_parameters()) packed_grads[p.key()] = p.value().grad().clone();
  expect_parameter_grads(layer, golden, "alone", 1e-4);

  // Our own samples one by one, in fp64 (the layer then computes in fp64 throughout): equal to
  // rounding, outputs and every gradient within 1e-9 relative to each tensor's largest entry.
  layer->to(torch::kFloat64);
  layer->zero_grad();
  const auto x64 = golden["alone.x"].to(torch::kFloat64);
  const auto r64 = r.to(torch::kFloat64);
  auto x_packed = x64.clone().requires_grad_();
  auto packed64 = layer->forward(x_packed, {}, cu);
  (packed64 * r64).sum().backward();
  std::map<std::string, torch::Tensor> packed64_grads;
  for (auto& p : layer->named_parameters()) packed64_grads[p.key()] = p.value().grad().clone();
  layer->zero_grad();
  auto x_alone = x64.clone().requires_grad_();
  std::vector<torch::Tensor> outs;
  torch::Tensor loss = torch::zeros({}, torch::kFloat64);
  for (size_t s = 1; s < cu.size(); ++s) {
    auto xs = x_alone.narrow(1, cu[s - 1], cu[s] - cu[s - 1]);
    outs.push_back(layer->forward(xs));
    loss = loss + (outs.back() * r64.narrow(1, cu[s - 1], cu[s] - cu[s - 1])).sum();
  }
  loss.backward();
  EXPECT_LT(relative_diff(packed64, torch::cat(outs, 1)), 1e-9);
  EXPECT_LT(relative_diff(x_packed.grad(), x_alone.grad()), 1e-9);
  for (auto& p : layer->named_parameters())
    EXPECT_LT(relative_diff(packed64_grads[p.key()], p.value().grad()), 1e-9) << p.key();

  // The boundaries matter: the row run as one sample differs from the packed one far beyond the
  // tolerances above, so a window or state leaking across a boundary cannot pass unseen.
  torch::NoGradGuard no_grad;
  auto as_one = layer->forward(x64);
  EXPECT_GT(max_abs_diff(as_one, packed64), 1e-2);
  // Each sample's first token alone: only the conv window could leak into it (the state is zero
  // before any token either way), so this isolates the conv restart from the state restart.
  for (size_t s = 2; s < cu.size(); ++s) {
    auto first = layer->forward(x64.narrow(1, cu[s - 1], 1));
    EXPECT_LT(relative_diff(packed64.narrow(1, cu[s - 1], 1), first), 1e-9) << "sample " << s - 1;
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, GatedDeltaNetParity, ::testing::Values("equal_heads", "grouped"),
                         [](const auto& info) { return info.param; });

// Random inputs shaped as the layer prepares them (unit q and k, q scaled, decays <= 0).
struct RuleInputs {
  torch::Tensor q, k, v, g, beta;
  RuleInputs narrow(int64_t start, int64_t length) const {
    return {q.narrow(1, start, length), k.narrow(1, start, length), v.narrow(1, start, length),
            g.narrow(1, start, length), beta.narrow(1, start, length)};
  }
};

RuleInputs random_rule_inputs(int64_t batch, int64_t seq, int64_t heads, int64_t key_dim, int64_t value_dim) {
  auto unit = [](torch::Tensor t) { return t / t.norm(2, -1, true); };
  return {unit(torch::randn({batch, seq, heads, key_dim})) / std::sqrt(static_cast<double>(key_dim)),
          unit(torch::randn({batch, seq, heads, key_dim})), torch::randn({batch, seq, heads, value_dim}),
          -torch::nn::functional::softplus(torch::randn({batch, seq, heads}) - 1.0),
          torch::sigmoid(torch::randn({batch, seq, heads}))};
}

TEST(GatedDeltaRule, ChunkedRecurrentAndVarlenAgreeOverLengthsAndChunkBoundaries) {
  torch::manual_seed(5);
  const int64_t max_len = 300, chunk = 16;
  auto in = random_rule_inputs(2, max_len, 3, 8, 6);
  auto recurrent = gated_delta_rule_recurrent(in.q, in.k, in.v, in.g, in.beta);
  // A causal recurrence: every prefix's outputs are the full run's first ones.
  double worst = 0;
  for (int64_t len = 1; len <= max_len; ++len) {
    auto p = in.narrow(0, len);
    auto chunked = gated_delta_rule_chunked(p.q, p.k, p.v, p.g, p.beta, chunk);
    worst = std::max(worst, max_abs_diff(chunked.out, recurrent.out.narrow(1, 0, len)));
  }
  EXPECT_LT(worst, 1e-5);
  // Final states around chunk boundaries.
  for (int64_t len : {1, 15, 16, 17, 63, 64, 65, 128, 299, 300}) {
    auto p = in.narrow(0, len);
    auto chunked = gated_delta_rule_chunked(p.q, p.k, p.v, p.g, p.beta, chunk);
    auto stepped = gated_delta_rule_recurrent(p.q, p.k, p.v, p.g, p.beta);
    EXPECT_LT(max_abs_diff(chunked.state, stepped.state), 1e-5) << len;
    auto wide = gated_delta_rule_chunked(p.q, p.k, p.v, p.g, p.beta, 64);
    EXPECT_LT(max_abs_diff(wide.out, chunked.out), 1e-5) << len;
  }
  // A state carried from one call to the next equals one call, chunked and recurrent.
  for (int64_t split : {1, 16, 40, 64, 151}) {
    auto head = in.narrow(0, split), tail = in.narrow(split, max_len - split);
    auto first = gated_delta_rule_chunked(head.q, head.k, head.v, head.g, head.beta, chunk);
    auto second = gated_delta_rule_chunked(tail.q, tail.k, tail.v, tail.g, tail.beta, chunk, first.state);
    EXPECT_LT(max_abs_diff(second.out, recurrent.out.narrow(1, split, max_len - split)), 1e-5) << split;
    EXPECT_LT(max_abs_diff(second.state, recurrent.state), 1e-5) << split;
    auto stepped = gated_delta_rule_recurrent(tail.q, tail.k, tail.v, tail.g, tail.beta, first.state);
    EXPECT_LT(max_abs_diff(stepped.out, second.out), 1e-5) << split;
  }
  // Packed samples around every chunk boundary, an empty one included, on batch row 0.
  const std::vector<int64_t> lengths = {1, 15, 16, 17, 0, 31, 32, 33, 64, 91};
  std::vector<int64_t> cu = {0};
  for (auto n : lengths) cu.push_back(cu.back() + n);
  ASSERT_EQ(cu.back(), max_len);
  auto row = RuleInputs{in.q.narrow(0, 0, 1), in.k.narrow(0, 0, 1), in.v.narrow(0, 0, 1), in.g.narrow(0, 0, 1),
                        in.beta.narrow(0, 0, 1)};
  auto varlen = gated_delta_rule_varlen(row.q, row.k, row.v, row.g, row.beta, cu, chunk);
  ASSERT_EQ(varlen.state.size(0), static_cast<int64_t>(lengths.size()));
  for (size_t s = 0; s < lengths.size(); ++s) {
    if (lengths[s] == 0) {
      EXPECT_EQ(varlen.state[s].abs().max().item<double>(), 0.0);
      continue;
    }
    auto p = row.narrow(cu[s], lengths[s]);
    auto alone = gated_delta_rule_recurrent(p.q, p.k, p.v, p.g, p.beta);
    EXPECT_LT(max_abs_diff(varlen.out.narrow(1, cu[s], lengths[s]), alone.out), 1e-5) << "sample " << s;
    EXPECT_LT(max_abs_diff(varlen.state[s], alone.state[0]), 1e-5) << "sample " << s;
  }
}

TEST(GatedDeltaRule, GradientsOfTheChunkedFormEqualTheRecurrentOnes) {
  torch::manual_seed(6);
  auto in = random_rule_inputs(1, 45, 2, 4, 3);
  std::vector<torch::Tensor> leaves = {in.q, in.k, in.v, in.g, in.beta};
  auto grads_of = [&](bool chunked) {
    std::vector<torch::Tensor> x;
    for (auto& t : leaves) x.push_back(t.detach().clone().requires_grad_());
    auto out = chunked ? gated_delta_rule_chunked(x[0], x[1], x[2], x[3], x[4], 8)
                       : gated_delta_rule_recurrent(x[0], x[1], x[2], x[3], x[4]);
    (out.out.sin().sum() + out.state.cos().sum()).backward();
    std::vector<torch::Tensor> g;
    for (auto& t : x) g.push_back(t.grad());
    return g;
  };
  auto chunked = grads_of(true), recurrent = grads_of(false);
  for (size_t i = 0; i < leaves.size(); ++i) EXPECT_LT(max_abs_diff(chunked[i], recurrent[i]), 1e-5) << i;
}

TEST(GatedDeltaNet, BadInputsAreNamed) {
  GatedDeltaNetOptions o;
  o.hidden_size = 16;
  o.num_key_heads = 2;
  o.num_value_heads = 3;
  o.key_head_dim = 4;
  o.value_head_dim = 4;
  EXPECT_THROW(
      {
        try {
          GatedDeltaNet bad(o);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("linear_num_value_heads (3)"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  o.num_value_heads = 4;
  GatedDeltaNet layer(o);
  torch::NoGradGuard no_grad;
  auto x = torch::randn({1, 10, 16});
  auto message = [&](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { layer->forward(torch::randn({10, 16})); }).find("[batch, seq, 16]"), std::string::npos);
  EXPECT_NE(message([&] { layer->forward(x, {}, {0, 4, 9}); }).find("0 to the row's 10 tokens"), std::string::npos);
  EXPECT_NE(message([&] { layer->forward(x, {}, {0, 6, 4, 10}); }).find("decreases at index 2"), std::string::npos);
  EXPECT_NE(message([&] { layer->forward(torch::randn({2, 10, 16}), {}, {0, 10}); }).find("batch 1"),
            std::string::npos);
  DeltaNetCache cache;
  EXPECT_NE(message([&] { layer->forward(x, {}, {0, 10}, &cache); }).find("take no cache"), std::string::npos);
  EXPECT_NE(message([&] { layer->forward(x, torch::ones({1, 9})); }).find("attention_mask"), std::string::npos);
}

}  // namespace
}  // namespace mm::testing
