// Random init (statistics and determinism, the rules of transformers' _init_weights) and the HF
// export: transformers' from_pretrained loads the exported directory with no missing or
// unexpected keys and reproduces mmtrain's logits on an image prompt within 1e-4, for an untied
// and a tied model, and with merged LoRA adapters.
#include <fstream>
#include <sstream>

#include "mm/models/qwen2_5_vl/qwen2_5_vl_vision.h"
#include "mm/models/qwen_vl/qwen_vl_hf_export.h"
#include "mm/core/json_config.h"
#include "mm/nn/linear.h"
#include "mm/nn/lora.h"
#include "test_files.h"
#include "testing.h"
#include "tiny_qwen2_5_vl.h"

namespace mm::testing {
namespace {

namespace fs = std::filesystem;

TEST(InitWeights, FollowsTransformersRules) {
  auto model = tiny_model(7);
  std::vector<torch::Tensor> vision, text;
  for (const auto& p : model->named_parameters()) {
    const auto& name = p.key();
    const auto& t = p.value();
    const bool is_norm = name.find("norm") != std::string::npos || name.find("ln_q") != std::string::npos;
    if (is_norm) {
      EXPECT_TRUE(torch::all(t == 1).item<bool>()) << name;
    } else if (name.size() > 5 && name.substr(name.size() - 5) == ".bias") {
      EXPECT_TRUE(torch::all(t == 0).item<bool>()) << name;
    } else {
      (name.rfind("visual.", 0) == 0 ? vision : text).push_back(t.detach().flatten());
    }
  }
  const auto v = torch::cat(vision), t = torch::cat(text);
  EXPECT_GT(v.numel(), 50000);
  EXPECT_GT(t.numel(), 50000);
  // Both ranges are 0.1 in the tiny config; make them differ to see each applied where it belongs.
  auto config = tiny_config();
  config.qwen2_5_vl_vision().initializer_range = 0.05;
  config.text.initializer_range = 0.2;
  QwenVLForConditionalGeneration other(config);
  init_weights(other, 7);
  EXPECT_NEAR(v.std().item<double>(), 0.1, 0.003);
  EXPECT_NEAR(t.std().item<double>(), 0.1, 0.003);
  EXPECT_NEAR(v.mean().item<double>(), 0.0, 0.002);
  auto* tower = dynamic_cast<Qwen2_5_VisionTransformerImpl*>(other->visual.get());
  ASSERT_NE(tower, nullptr);
  EXPECT_NEAR(tower->patch_embed->proj->weight.std().item<double>(), 0.05, 0.003);
  EXPECT_NEAR(tower->merger->mlp[0]->as<LinearImpl>()->weight.std().item<double>(), 0.05, 0.003);
  EXPECT_NEAR(other->model->embed_tokens->weight.std().item<double>(), 0.2, 0.006);
  EXPECT_NEAR(other->lm_head->weight.std().item<double>(), 0.2, 0.006);
  EXPECT_NEAR(other->model->layers->ptr<Qwen2DecoderLayerImpl>(0)->mlp->down_proj->weight.std().item<double>(), 0.2,
              0.01);
}

TEST(InitWeights, SameSeedSameWeights) {
  torch::manual_seed(1);
  auto a = tiny_model(99);
  torch::manual_seed(2);  // the global RNG plays no part
  auto b = tiny_model(99);
  auto c = tiny_model(100);
  auto pa = a->named_parameters(), pb = b->named_parameters(), pc = c->named_parameters();
  bool any_differs = false;
  for (const auto& p : pa) {
    EXPECT_TRUE(torch::equal(p.value(), pb[p.key()])) << p.key();
    any_differs = any_differs || !torch::equal(p.value(), pc[p.key()]);
  }
  EXPECT_TRUE(any_differs);
}

class HfExport : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_dir("hf_export");
    assets_ = dir_ / "assets";
    fs::create_directories(assets_);
    std::ofstream(assets_ / "tokenizer.json") << R"({"version": "1.0", "model": {"type": "BPE"}})";
    std::ofstream(assets_ / "tokenizer_config.json") << R"({"model_max_length": 32768})";
    std::ofstream(assets_ / "preprocessor_config.json") << R"({"patch_size": 14})";
    std::ofstream(assets_ / "chat_template.jinja") << "{{ messages }}";
    std::ofstream(assets_ / "generation_config.json") << R"({"eos_token_id": [2], "do_sample": false})";
    std::ofstream(assets_ / "config.json") << R"({"stale": true})";  // replaced by the model's
    std::ofstream(assets_ / "notes.txt") << "not part of a model directory";
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs the oracle on `exported` and compares with mmtrain's logits for the same inputs.
  void expect_transformers_agrees(QwenVLForConditionalGeneration& model, const fs::path& exported,
                                  const std::string& tag) {
    auto in = tiny_sample(tiny_config(), 5, 4, 8, 6, 12);
    torch::Tensor ours;
    {
      torch::NoGradGuard no_grad;
      model->eval();
      ours = model->forward(in);
    }
    const auto inputs = dir_ / (tag + "_inputs.safetensors");
    save_safetensors(inputs, {{"input_ids", in.input_ids}, {"pixel_values", in.pixel_values},
                              {"image_grid_thw", in.image_grid_thw}});
    const auto out = dir_ / (tag + "_oracle");
    const auto [status, log] = run_command(kPython + " " + (kSourceDir / "tests/reference/hf_export_check.py").string() +
                                           " " + exported.string() + " " + inputs.string() + " " + out.string());
    ASSERT_EQ(status, 0) << log;
    const auto info = read_json_file(out / "loading_info.json");
    for (const char* key : {"missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"})
      if (info.contains(key)) {
        EXPECT_TRUE(info[key].empty()) << tag << " " << key << ": " << info[key].dump();
      }
    const auto theirs = SafetensorsFile::open(out / "logits.safetensors")->tensor("logits");
    EXPECT_LT(max_abs_diff(ours, theirs), 1e-4) << tag;
  }

  fs::path dir_, assets_;
};

TEST_F(HfExport, TransformersLoadsItAndAgrees) {
  auto model = tiny_model(41);
  const auto out = dir_ / "export";
  export_hf(model, assets_, out);
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "preprocessor_config.json",
                           "chat_template.jinja", "generation_config.json"})
    EXPECT_EQ(read_file(out / name), read_file(assets_ / name)) << name;
  EXPECT_FALSE(fs::exists(out / "notes.txt"));
  const auto config = read_json_file(out / "config.json");
  EXPECT_EQ(config["model_type"], "qwen2_5_vl");
  EXPECT_EQ(config["dtype"], "float32");
  // Nothing but the export is left next to it (the temporary directory was renamed).
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir_)) entries += e.path().filename().string()[0] == '.' ? 100 : 1;
  EXPECT_EQ(entries, 2);  // assets, export
  // mmtrain reads it back to the same weights.
  auto reloaded = QwenVLForConditionalGenerationImpl::from_pretrained(out);
  auto mine = model->named_parameters();
  for (const auto& p : reloaded->named_parameters()) EXPECT_TRUE(torch::equal(p.value(), mine[p.key()])) << p.key();
  expect_transformers_agrees(model, out, "untied");
}

TEST_F(HfExport, TiedEmbeddings) {
  auto model = tiny_model(42, /*tied=*/true);
  const auto out = dir_ / "tied";
  export_hf(model, assets_, out);
  EXPECT_FALSE(Checkpoint::open(out).contains("lm_head.weight"));
  expect_transformers_agrees(model, out, "tied");
}

TEST_F(HfExport, LoraIsMergedIntoTheExportOnly) {
  auto model = tiny_model(43);
  LoraConfig config;
  config.exclude_prefixes = {};
  config.target_modules.push_back("qkv");
  const int64_t adapters = apply_lora(*model, config);
  {
    torch::NoGradGuard no_grad;
    for (const auto& p : model->named_parameters())
      if (p.key().find("lora_B") != std::string::npos) p.value().normal_(0.0, 0.2);
  }
  const auto base = dir_ / "base";
  {
    auto plain = tiny_model(43);
    export_hf(plain, assets_, base);
  }
  const auto out = dir_ / "merged";
  export_hf(model, assets_, out);
  // The live model keeps its adapters.
  int64_t live = 0;
  for (const auto& m : model->modules())
    if (auto* l = dynamic_cast<LinearImpl*>(m.get())) live += l->has_lora();
  EXPECT_EQ(live, adapters);
  auto file = Checkpoint::open(out);
  for (const auto& name : file.names()) EXPECT_EQ(name.find("lora"), std::string::npos) << name;
  // The merge changed the adapted weights only.
  auto before = Checkpoint::open(base);
  EXPECT_FALSE(torch::equal(file.tensor("model.language_model.layers.0.self_attn.q_proj.weight"),
                            before.tensor("model.language_model.layers.0.self_attn.q_proj.weight")));
  EXPECT_FALSE(torch::equal(file.tensor("model.visual.blocks.1.attn.qkv.weight"), before.tensor("model.visual.blocks.1.attn.qkv.weight")));
  EXPECT_TRUE(torch::equal(file.tensor("model.language_model.layers.0.self_attn.q_proj.bias"),
                           before.tensor("model.language_model.layers.0.self_attn.q_proj.bias")));
  EXPECT_TRUE(torch::equal(file.tensor("lm_head.weight"), before.tensor("lm_head.weight")));
  expect_transformers_agrees(model, out, "lora");
}

TEST_F(HfExport, ReplacesAnOldExportAndRejectsMissingAssets) {
  auto model = tiny_model(44);
  const auto out = dir_ / "again";
  fs::create_directories(out);
  std::ofstream(out / "stale.bin") << "old";
  export_hf(model, assets_, out);
  EXPECT_FALSE(fs::exists(out / "stale.bin"));
  EXPECT_TRUE(fs::exists(out / "model.safetensors"));
  EXPECT_THROW_MSG(export_hf(model, dir_ / "nope", dir_ / "x"), "is not a directory");
  EXPECT_FALSE(fs::exists(dir_ / "x"));
}

}  // namespace
}  // namespace mm::testing
