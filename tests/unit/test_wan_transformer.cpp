// The Wan DiT against diffusers' WanTransformer3DModel on tiny random fp32 weights: outputs and
// gradients (input latents, patch embedding, attention, modulation tables, condition embedders)
// for text-to-video, Wan2.1 I2V (image embedder + added k/v, sharded checkpoint), FLF2V
// (pos_embed) and Wan2.2 TI2V per-token timesteps; a recomputing block runner gives the same
// gradients; bf16 loading keeps diffusers' fp32 modules and gives diffusers' bf16 output bit for
// bit; broken configs, checkpoints and inputs are refused by name.
#include <fstream>

#include "mm/core/json_config.h"
#include "mm/core/safetensors.h"
#include "mm/nn/weights.h"
#include "mm/models/wan/wan_block.h"
#include "mm/models/wan/wan_transformer.h"
#include "mm/train/recompute.h"
#include "testing.h"

namespace mm {
namespace {

namespace fs = std::filesystem;
using testing::golden_dir;
using testing::max_abs_diff;

struct Case {
  torch::Tensor latents, timestep, text, image, out, loss_weight;
};

Case load_case(const Checkpoint& cases) {
  Case c{cases.tensor("latents"), cases.tensor("timestep"), cases.tensor("text"), {}, cases.tensor("out"),
         cases.tensor("loss_weight")};
  if (cases.contains("image")) c.image = cases.tensor("image");
  return c;
}

std::vector<std::string> grad_names(const Checkpoint& cases) {
  const auto bytes = cases.tensor("grad_names").contiguous();
  std::string all(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), bytes.numel());
  std::vector<std::string> names;
  std::istringstream in(all);
  for (std::string line; std::getline(in, line);) names.push_back(line);
  return names;
}

double relative_diff(const torch::Tensor& ours, const torch::Tensor& expected) {
  return max_abs_diff(ours, expected) / std::max(expected.abs().max().item<double>(), 1e-12);
}

class WanTransformer : public ::testing::TestWithParam<std::string> {
 protected:
  fs::path dir() const { return golden_dir("wan_transformer") / GetParam(); }
};

TEST_P(WanTransformer, OutputMatchesDiffusers) {
  auto model = WanTransformer3DModelImpl::from_pretrained(dir() / "model");
  const auto c = load_case(Checkpoint::open(dir() / "cases.safetensors"));
  torch::NoGradGuard no_grad;
  const auto out = model->forward(c.latents, c.timestep, c.text, c.image);
  const double diff = max_abs_diff(out, c.out);
  EXPECT_LT(diff, 1e-4);
  std::cout << GetParam() << ": max |ours - diffusers| = " << diff << " (outputs up to "
            << c.out.abs().max().item<double>() << ", shape " << out.sizes() << ")\n";
}

// Gradients of (out * loss_weight).sum() with respect to the latents and the parameters the
// oracle recorded; returns the latents' gradient and the parameters' by name.
std::map<std::string, torch::Tensor> gradients(WanTransformer3DModelImpl& model, const Case& c) {
  model.zero_grad();
  for (auto& p : model.parameters()) p.mutable_grad() = torch::Tensor();
  auto latents = c.latents.clone().requires_grad_(true);
  (model.forward(latents, c.timestep, c.text, c.image) * c.loss_weight).sum().backward();
  std::map<std::string, torch::Tensor> grads{{"latents", latents.grad()}};
  for (const auto& p : model.named_parameters())
    grads[p.key()] = p.value().grad().defined() ? p.value().grad().clone() : torch::Tensor();
  return grads;
}

TEST_P(WanTransformer, GradientsMatchDiffusers) {
  auto model = WanTransformer3DModelImpl::from_pretrained(dir() / "model");
  model->train();
  const auto cases = Checkpoint::open(dir() / "cases.safetensors");
  const auto grads = gradients(*model, load_case(cases));
  const auto names = grad_names(cases);
  ASSERT_GE(names.size(), 11u);
  int compared = 0;
  for (const auto& name : std::vector<std::string>{"latents"}) {
    const double rel = relative_diff(grads.at(name), cases.tensor("grad." + name));
    EXPECT_LT(rel, 1e-4) << name;
    std::cout << GetParam() << ": grad " << name << " max |diff| / max |diffusers| = " << rel << "\n";
    ++compared;
  }
  for (const auto& name : names) {
    ASSERT_TRUE(grads.count(name)) << name << " is not a parameter";
    ASSERT_TRUE(grads.at(name).defined()) << name << " got no gradient";
    const double rel = relative_diff(grads.at(name), cases.tensor("grad." + name));
    EXPECT_LT(rel, 1e-4) << name;
    std::cout << GetParam() << ": grad " << name << " max |diff| / max |diffusers| = " << rel << "\n";
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(names.size()) + 1);
}

// Recomputation (and a pass-through runner) through the block hook: every gradient, including the
// condition embedder's (whose outputs the blocks capture), equals the plain run's.
TEST_P(WanTransformer, BlockRunnerGradientsEqualPlain) {
  auto model = WanTransformer3DModelImpl::from_pretrained(dir() / "model");
  model->train();
  const auto c = load_case(Checkpoint::open(dir() / "cases.safetensors"));
  const auto plain = gradients(*model, c);
  int calls = 0;
  const BlockRunner recompute = recompute_runner();
  const BlockRunner runners[] = {
      [&](torch::nn::Module& block, const BlockFn& run, const torch::Tensor& x) {
        ++calls;
        EXPECT_NE(dynamic_cast<WanTransformerBlockImpl*>(&block), nullptr);
        return recompute(block, run, x);
      },
      [&](torch::nn::Module&, const BlockFn& run, const torch::Tensor& x) {
        ++calls;
        return run(x);
      }};
  for (const auto& runner : runners) {
    model->block_runner = runner;
    const auto hooked = gradients(*model, c);
    model->block_runner = nullptr;
    ASSERT_EQ(hooked.size(), plain.size());
    double worst = 0;
    for (const auto& [name, grad] : plain) {
      ASSERT_TRUE(grad.defined()) << name << " got no gradient";
      ASSERT_TRUE(hooked.at(name).defined()) << name << " got no gradient through the runner";
      const double diff = max_abs_diff(hooked.at(name), grad);
      EXPECT_LE(diff, 1e-6 * std::max(1.0, grad.abs().max().item<double>())) << name;
      worst = std::max(worst, diff);
    }
    std::cout << GetParam() << ": block runner, " << plain.size() << " gradients, max |diff| = " << worst << "\n";
  }
  EXPECT_EQ(calls, 2 * model->config().num_layers);
}

INSTANTIATE_TEST_SUITE_P(Configs, WanTransformer, ::testing::Values("t2v", "i2v", "flf2v", "ti2v"));

TEST(WanTransformerLoad, Bf16KeepsDiffusersFp32Modules) {
  auto model = WanTransformer3DModelImpl::from_pretrained(golden_dir("wan_transformer") / "i2v" / "model", torch::kBFloat16);
  const auto params = model->named_parameters();
  for (const auto* name : {"scale_shift_table", "blocks.1.scale_shift_table", "blocks.0.norm2.weight",
                           "condition_embedder.time_embedder.linear_2.weight",
                           "condition_embedder.image_embedder.norm1.weight"})
    EXPECT_EQ(params[name].scalar_type(), torch::kFloat32) << name;
  for (const auto* name : {"patch_embedding.weight", "blocks.0.attn1.to_q.weight", "blocks.0.attn1.norm_q.weight",
                           "condition_embedder.time_proj.weight", "proj_out.weight"})
    EXPECT_EQ(params[name].scalar_type(), torch::kBFloat16) << name;
}

// The dtype flow (fp32 modulation, norms and time MLP around bf16 projections, the residual stream
// stored in bf16) equals diffusers' bit for bit in bf16.
TEST(WanTransformerLoad, Bf16OutputEqualsDiffusersBf16) {
  const auto dir = golden_dir("wan_transformer") / "i2v";
  auto model = WanTransformer3DModelImpl::from_pretrained(dir / "model", torch::kBFloat16);
  const auto cases = Checkpoint::open(dir / "cases.safetensors");
  const auto c = load_case(cases);
  torch::NoGradGuard no_grad;
  const auto out = model->forward(c.latents, c.timestep, c.text, c.image);
  EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
  const double diff = max_abs_diff(out, cases.tensor("out_bf16"));
  EXPECT_EQ(diff, 0.0) << "the linear layers must round as torch's F.linear (at::linear) does";
  std::cout << "i2v bf16: max |ours - diffusers bf16| = " << diff << " (diffusers bf16 vs fp32: "
            << max_abs_diff(cases.tensor("out_bf16"), c.out) << ")\n";
}

TEST(WanTransformerErrors, BadConfigsAndCheckpointsAreNamed) {
  const auto tmp = testing::temp_dir("wan_bad");
  const auto source = golden_dir("wan_transformer") / "t2v" / "model";
  const auto config = read_json_file(source / "config.json");
  auto write = [&](const std::string& name, const nlohmann::json& json) {
    fs::create_directories(tmp / name);
    std::ofstream(tmp / name / "config.json") << json.dump();
    fs::copy_file(source / "diffusion_pytorch_model.safetensors", tmp / name / "diffusion_pytorch_model.safetensors",
                  fs::copy_options::overwrite_existing);
    return tmp / name;
  };
  auto with = [&](const std::string& key, const nlohmann::json& value) {
    auto j = config;
    j[key] = value;
    return j;
  };
  EXPECT_THROW_MSG(WanTransformer3DModelImpl::from_pretrained(write("qk", with("qk_norm", "rms_norm"))),
                   "qk_norm='rms_norm' is not supported");
  EXPECT_THROW_MSG(WanTransformer3DModelImpl::from_pretrained(write("patch", with("patch_size", {1, 2}))),
                   "patch_size: must list 3 sizes");
  EXPECT_THROW_MSG(WanTransformer3DModelImpl::from_pretrained(write("patch0", with("patch_size", {1, 0, 2}))),
                   "patch_size[1]=0");
  EXPECT_THROW_MSG(WanTransformer3DModelImpl::from_pretrained(write("class", with("_class_name", "WanVACETransformer3DModel"))),
                   "_class_name: 'WanVACETransformer3DModel' is not a Wan transformer");
  EXPECT_THROW_MSG(WanTransformer3DModelImpl::from_pretrained(write("head", with("attention_head_dim", 7))),
                   "attention_head_dim=7");
  EXPECT_THROW_MSG(WanTransformer3DModelImpl::from_pretrained(write("image", with("image_dim", 10))),
                   "added_kv_proj_dim is missing");
  auto kv = with("image_dim", 10);
  kv["added_kv_proj_dim"] = 16;
  EXPECT_THROW_MSG(WanTransformer3DModelImpl::from_pretrained(write("kv", kv)), "added_kv_proj_dim=16 must equal");
  EXPECT_THROW_MSG(WanTransformer3DModelImpl::from_pretrained(write("pos", with("pos_embed_seq_len", 10))),
                   "pos_embed_seq_len is set without image_dim");
  EXPECT_THROW_MSG(WanTransformer3DModelImpl::from_pretrained(write("eps", with("eps", "small"))),
                   "eps: has the wrong type");
  EXPECT_THROW_MSG(WanTransformer3DModelImpl::from_pretrained(write("layers", with("num_layers", 3))),
                   "missing: blocks.2.");
  // A size no machine holds fails before anything is allocated, naming the key.
  EXPECT_THROW_MSG(WanTransformer3DModelImpl::from_pretrained(write("huge", with("num_layers", 1000000000))),
                   "num_layers (1000000000) x a block");
  EXPECT_THROW_MSG(WanTransformer3DModelImpl::from_pretrained(write("ffn", with("ffn_dim", 48))),
                   "wrong shape: blocks.0.ffn.net.0.proj.bias");
  EXPECT_THROW_MSG(WanTransformer3DModelImpl::from_pretrained(write("norm", with("cross_attn_norm", false))),
                   "unexpected: blocks.0.norm2.bias");

  // A tensor missing from the file, and an ignored norm_added_q (diffusers skips it too).
  auto tensors = named_weights(*WanTransformer3DModelImpl::from_pretrained(source));
  auto dropped = tensors;
  dropped.erase(std::find_if(dropped.begin(), dropped.end(),
                             [](const auto& t) { return t.first == "blocks.1.attn2.norm_k.weight"; }));
  write("dropped", config);
  save_safetensors(tmp / "dropped" / "diffusion_pytorch_model.safetensors", dropped);
  EXPECT_THROW_MSG(WanTransformer3DModelImpl::from_pretrained(tmp / "dropped"), "missing: blocks.1.attn2.norm_k.weight");
  auto extra = tensors;
  extra.emplace_back("blocks.0.attn2.norm_added_q.weight", torch::ones({24}));
  write("extra", config);
  save_safetensors(tmp / "extra" / "diffusion_pytorch_model.safetensors", extra);
  EXPECT_NO_THROW(WanTransformer3DModelImpl::from_pretrained(tmp / "extra"));
  extra.emplace_back("blocks.0.attn2.add_q_proj.weight", torch::ones({24, 24}));
  save_safetensors(tmp / "extra" / "diffusion_pytorch_model.safetensors", extra);
  EXPECT_THROW_MSG(WanTransformer3DModelImpl::from_pretrained(tmp / "extra"), "unexpected: blocks.0.attn2.add_q_proj.weight");
  fs::remove_all(tmp);
}

TEST(WanTransformerErrors, BadInputsAreNamed) {
  auto t2v = WanTransformer3DModelImpl::from_pretrained(golden_dir("wan_transformer") / "t2v" / "model");
  auto i2v = WanTransformer3DModelImpl::from_pretrained(golden_dir("wan_transformer") / "i2v" / "model");
  torch::NoGradGuard no_grad;
  const auto latents = torch::randn({2, 4, 3, 4, 6});
  const auto text = torch::randn({2, 5, 16});
  EXPECT_THROW_MSG(t2v->forward(torch::randn({2, 4, 3, 5, 6}), torch::ones({2}), text), "must be divisible by patch_size");
  EXPECT_THROW_MSG(t2v->forward(latents, torch::ones({2, 7}), text), "timestep must be [2] or per token [2, 18]");
  EXPECT_THROW_MSG(t2v->forward(latents, torch::ones({2}), torch::randn({2, 5, 8})), "text must be [2, text_len, 16]");
  EXPECT_THROW_MSG(t2v->forward(latents, torch::ones({2}), text, torch::randn({2, 5, 10})),
                   "image_embeds given to a model without image_dim");
  EXPECT_THROW_MSG(i2v->forward(torch::randn({2, 6, 1, 4, 4}), torch::ones({2}), text), "image_embeds must be [2, img, 10]");
  EXPECT_THROW_MSG(t2v->forward(torch::randn({1, 4, 40, 4, 4}), torch::ones({1}), text.slice(0, 0, 1)),
                   "exceeds rope_max_seq_len=32");
}

}  // namespace
}  // namespace mm
