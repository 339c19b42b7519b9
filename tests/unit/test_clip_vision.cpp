// The CLIP vision tower and image processor of Wan2.1-I2V against transformers 5.17's
// CLIPVisionModel / CLIPImageProcessor on tiny random weights and synthetic images: every hidden
// state, the pooled output and the penultimate state (what Wan conditions on) within 1e-4 (fp32,
// quick_gelu and gelu, checkpoints with and without the "vision_model." prefix, a full CLIPModel
// checkpoint); pixel values within 1e-5 for down- and up-scaling, several aspect ratios, crop
// padding and a fixed-size resize (and within 2 uint8 levels of the PIL backend, for the record);
// broken configs, checkpoints and inputs refused by name.
#include <algorithm>
#include <fstream>

#include "mm/core/json_config.h"
#include "mm/core/safetensors.h"
#include "mm/models/clip/clip_image_processor.h"
#include "mm/models/clip/clip_vision.h"
#include "testing.h"

namespace mm {
namespace {

namespace fs = std::filesystem;
using testing::golden_dir;
using testing::max_abs_diff;

std::string case_name(int i) { return "case" + std::to_string(i); }

class CLIPVision : public ::testing::TestWithParam<std::string> {};

TEST_P(CLIPVision, HiddenStatesMatchTransformers) {
  const auto dir = golden_dir("clip_vision") / GetParam();
  auto model = CLIPVisionModelImpl::from_pretrained(dir);
  const auto cases = Checkpoint::open(dir / "cases.safetensors");
  const int64_t layers = model->config().num_hidden_layers;
  torch::NoGradGuard no_grad;
  int i = 0;
  for (; cases.contains(case_name(i) + ".pooler_output"); ++i) {
    const std::string c = case_name(i);
    const auto pixels = cases.tensor(c + ".pixel_values");
    const auto out = model->forward(pixels);
    ASSERT_EQ(static_cast<int64_t>(out.hidden_states.size()), layers + 1);
    ASSERT_FALSE(cases.contains(c + ".hidden_states." + std::to_string(layers + 1))) << "more states in the golden";
    double worst = 0;
    for (int64_t j = 0; j <= layers; ++j) {
      const double diff = max_abs_diff(out.hidden_states[j], cases.tensor(c + ".hidden_states." + std::to_string(j)));
      EXPECT_LT(diff, 1e-4) << c << " hidden_states[" << j << "]";
      worst = std::max(worst, diff);
    }
    const double last = max_abs_diff(out.last_hidden_state, cases.tensor(c + ".last_hidden_state"));
    const double pooled = max_abs_diff(out.pooler_output, cases.tensor(c + ".pooler_output"));
    const auto expected_penultimate = cases.tensor(c + ".hidden_states." + std::to_string(layers - 1));
    const double penultimate = max_abs_diff(model->penultimate_hidden_state(pixels), expected_penultimate);
    EXPECT_LT(last, 1e-4) << c;
    EXPECT_LT(pooled, 1e-4) << c;
    EXPECT_LT(penultimate, 1e-4) << c;
    std::cout << GetParam() << " " << c << " (batch " << pixels.size(0) << "): max |ours - transformers| hidden states "
              << worst << ", last " << last << ", pooled " << pooled << ", penultimate " << penultimate
              << " (states up to " << expected_penultimate.abs().max().item<double>() << ")\n";
  }
  EXPECT_EQ(i, 2) << "cases in the golden";
}

INSTANTIATE_TEST_SUITE_P(Configs, CLIPVision, ::testing::Values("a", "b", "c"),
                         [](const auto& info) { return info.param; });

TEST(CLIPVisionConfigs, ReadsVisionAndFullClipConfigs) {
  const auto a = CLIPVisionConfig::from_file(golden_dir("clip_vision") / "a" / "config.json");
  EXPECT_EQ(a.hidden_act, "quick_gelu");
  EXPECT_EQ(a.num_hidden_layers, 3);
  EXPECT_EQ(a.num_positions(), 17);
  const auto b = CLIPVisionConfig::from_file(golden_dir("clip_vision") / "b" / "config.json");
  EXPECT_EQ(b.grid(), 3);  // image 28, patch 8: the conv drops the remainder
  EXPECT_DOUBLE_EQ(b.layer_norm_eps, 1e-6);
  const auto c = CLIPVisionConfig::from_file(golden_dir("clip_vision") / "c" / "config.json");
  EXPECT_EQ(c.hidden_act, "gelu");
  EXPECT_EQ(c.num_attention_heads, 2);
  EXPECT_EQ(c.intermediate_size, 64);
}

TEST(CLIPVisionErrors, BadConfigsAreNamed) {
  auto config = read_json_file(golden_dir("clip_vision") / "a" / "config.json");
  auto parse = [](const nlohmann::json& json) { return CLIPVisionConfig::parse(json, "config.json"); };
  auto act = config;
  act["hidden_act"] = "relu";
  EXPECT_THROW_MSG(parse(act), "config.json: hidden_act='relu' is not supported");
  auto heads = config;
  heads["num_attention_heads"] = 5;
  EXPECT_THROW_MSG(parse(heads), "num_attention_heads=5 does not divide hidden_size=32");
  auto patch = config;
  patch["patch_size"] = 64;
  EXPECT_THROW_MSG(parse(patch), "patch_size=64 exceeds image_size=32");
  auto layers = config;
  layers["num_hidden_layers"] = 0;
  EXPECT_THROW_MSG(parse(layers), "num_hidden_layers=0 must be positive");
  layers["num_hidden_layers"] = 1000000000;  // bounded by memory before anything is built
  EXPECT_THROW_MSG(parse(layers), "num_hidden_layers (1000000000) x a layer");
  auto type = config;
  type["model_type"] = "siglip_vision_model";
  EXPECT_THROW_MSG(parse(type), "model_type: 'siglip_vision_model' is not a CLIP vision tower");
  auto wrong_type = config;
  wrong_type["image_size"] = "big";
  EXPECT_THROW_MSG(parse(wrong_type), "config.json: image_size: has the wrong type");
  auto full = read_json_file(golden_dir("clip_vision") / "c" / "config.json");
  full["vision_config"]["hidden_act"] = "silu";
  EXPECT_THROW_MSG(parse(full), "config.json: vision_config.hidden_act='silu'");
}

TEST(CLIPVisionErrors, BadCheckpointsAndInputsAreNamed) {
  const auto dir = testing::temp_dir("clip_vision_bad");
  const auto source = golden_dir("clip_vision") / "a";
  const auto config = read_json_file(source / "config.json");
  const auto checkpoint = Checkpoint::open(source / "model.safetensors");
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& name : checkpoint.names()) tensors.emplace_back(name, checkpoint.tensor(name));

  auto write = [&](const std::string& name, const nlohmann::json& json,
                   const std::vector<std::pair<std::string, torch::Tensor>>& weights) {
    fs::create_directories(dir / name);
    std::ofstream(dir / name / "config.json") << json.dump();
    save_safetensors(dir / name / "model.safetensors", weights);
    return dir / name;
  };
  auto more_layers = config;
  more_layers["num_hidden_layers"] = 4;  // the checkpoint has 3
  EXPECT_THROW_MSG(CLIPVisionModelImpl::from_pretrained(write("layers", more_layers, tensors)),
                   "missing: vision_model.encoder.layers.3.");
  auto wider = config;
  wider["intermediate_size"] = 40;
  EXPECT_THROW_MSG(CLIPVisionModelImpl::from_pretrained(write("wider", wider, tensors)),
                   "wrong shape: vision_model.encoder.layers.0.mlp.fc1.bias");
  auto without = tensors;
  std::erase_if(without, [](const auto& t) { return t.first == "vision_model.embeddings.class_embedding"; });
  EXPECT_THROW_MSG(CLIPVisionModelImpl::from_pretrained(write("missing", config, without)),
                   "missing: vision_model.embeddings.class_embedding");
  auto extra = tensors;
  extra.emplace_back("vision_model.encoder.layers.0.self_attn.qkv.weight", torch::zeros({4}));
  EXPECT_THROW_MSG(CLIPVisionModelImpl::from_pretrained(write("extra", config, extra)),
                   "unexpected: vision_model.encoder.layers.0.self_attn.qkv.weight");
  auto both = tensors;  // the same tensor with and without the prefix
  both.emplace_back("pre_layrnorm.weight", checkpoint.tensor("vision_model.pre_layrnorm.weight"));
  EXPECT_THROW_MSG(CLIPVisionModelImpl::from_pretrained(write("both", config, both)),
                   "two checkpoint tensors map to vision_model.pre_layrnorm.weight");

  // The parity bound is not vacuous: the wrong activation is far outside it.
  auto gelu = config;
  gelu["hidden_act"] = "gelu";
  auto wrong = CLIPVisionModelImpl::from_pretrained(write("gelu", gelu, tensors));
  const auto cases = Checkpoint::open(source / "cases.safetensors");
  torch::NoGradGuard no_grad;
  EXPECT_GT(max_abs_diff(wrong->forward(cases.tensor("case0.pixel_values")).hidden_states[1],
                         cases.tensor("case0.hidden_states.1")),
            1e-2);

  auto model = CLIPVisionModelImpl::from_pretrained(source);
  EXPECT_THROW_MSG(model->forward(torch::zeros({1, 3, 64, 64})), "pixel_values must be [batch, 3, 32, 32]");
  EXPECT_THROW_MSG(model->penultimate_hidden_state(torch::zeros({3, 32, 32})), "pixel_values must be");
}

// Processors: parity with transformers' CLIPImageProcessor given the same images as PIL images.
class CLIPImageProcessing : public ::testing::TestWithParam<std::pair<std::string, int>> {};

TEST_P(CLIPImageProcessing, PixelValuesMatchTransformers) {
  const auto& [name, expected_cases] = GetParam();
  const auto dir = golden_dir("clip_vision") / "processor" / name;
  const auto processor = CLIPImageProcessor::from_pretrained(dir);
  const auto cases = Checkpoint::open(dir / "cases.safetensors");
  const auto& c = processor.config();
  // One uint8 level after rescale and normalize: the resolution at which PIL's bicubic differs.
  const double level = (c.do_rescale ? c.rescale_factor : 1.0) /
                       (c.do_normalize ? *std::min_element(c.image_std.begin(), c.image_std.end()) : 1.0);
  int i = 0;
  for (; cases.contains(case_name(i) + ".pixel_values"); ++i) {
    const std::string cn = case_name(i);
    std::vector<at::Tensor> images;
    for (int k = 0; cases.contains(cn + ".image" + std::to_string(k)); ++k)
      images.push_back(cases.tensor(cn + ".image" + std::to_string(k)));
    const auto pixels = processor.preprocess(images);
    const double diff = max_abs_diff(pixels, cases.tensor(cn + ".pixel_values"));
    const double pil = max_abs_diff(pixels, cases.tensor(cn + ".pil_pixel_values"));
    EXPECT_LT(diff, 1e-5) << name << " " << cn;
    EXPECT_LE(pil, 2 * level + 1e-5) << name << " " << cn;
    std::cout << name << " " << cn << " " << images.front().size(0) << "x" << images.front().size(1) << " (" << images.size()
              << " images) -> " << pixels.sizes() << ": max |ours - CLIPImageProcessor| = " << diff
              << "; vs CLIPImageProcessorPil " << pil << " (" << pil / level << " uint8 levels)\n";
  }
  EXPECT_EQ(i, expected_cases) << "cases in the golden";
}

INSTANTIATE_TEST_SUITE_P(Configs, CLIPImageProcessing,
                         ::testing::Values(std::pair<std::string, int>{"wan", 8}, std::pair<std::string, int>{"pad", 3},
                                           std::pair<std::string, int>{"fixed", 2}),
                         [](const auto& info) { return info.param.first; });

TEST(CLIPImageProcessing, ResizedSizeFollowsTheShortestEdge) {
  const CLIPImageProcessor processor;  // the defaults: Wan2.1-I2V's shortest edge 224
  using Size = std::pair<int64_t, int64_t>;
  EXPECT_EQ(processor.resized_size(480, 832), Size(224, 388));
  EXPECT_EQ(processor.resized_size(832, 480), Size(388, 224));
  EXPECT_EQ(processor.resized_size(100, 100), Size(224, 224));
  EXPECT_EQ(processor.resized_size(3, 1000), Size(224, 74666));
}

TEST(CLIPImageProcessing, BadConfigsAndImagesAreNamed) {
  const auto wan = read_json_file(golden_dir("clip_vision") / "processor" / "wan" / "preprocessor_config.json");
  auto parse = [](const nlohmann::json& json) { return CLIPImageProcessorConfig::parse(json, "preprocessor_config.json"); };
  auto resample = wan;
  resample["resample"] = 2;
  EXPECT_THROW_MSG(parse(resample), "preprocessor_config.json: resample: only 3 (bicubic) is supported, got 2");
  auto longest = wan;
  longest["size"] = {{"shortest_edge", 224}, {"longest_edge", 300}};
  EXPECT_THROW_MSG(parse(longest), "preprocessor_config.json: size: only {shortest_edge} or {height, width}");
  auto crop = wan;
  crop["crop_size"] = {{"height", 224}};
  EXPECT_THROW_MSG(parse(crop), "preprocessor_config.json: crop_size.width: missing required key");
  auto edge = wan;
  edge["size"] = {{"shortest_edge", 0}};
  EXPECT_THROW_MSG(parse(edge), "size.shortest_edge: must be positive, got 0");
  auto stdev = wan;
  stdev["image_std"] = {0.2, 0.0, 0.3};
  EXPECT_THROW_MSG(parse(stdev), "image_std: must be non-zero");
  auto channels = wan;
  channels["image_mean"] = {0.5, 0.5};
  EXPECT_THROW_MSG(parse(channels), "image_mean: expected 1 or 3 values");
  // Legacy forms: a bare size is the shortest edge, a bare crop size a square.
  auto legacy = wan;
  legacy["size"] = 64;
  legacy["crop_size"] = 48;
  const auto config = parse(legacy);
  EXPECT_EQ(config.shortest_edge, 64);
  EXPECT_EQ(config.crop_height, 48);
  EXPECT_EQ(config.crop_width, 48);

  const CLIPImageProcessor processor;
  EXPECT_THROW_MSG(processor.preprocess({torch::zeros({10, 10, 3}, torch::kFloat)}), "image 0: expected uint8 [H, W, 3]");
  EXPECT_THROW_MSG(processor.preprocess({torch::zeros({10, 10, 3}, torch::kByte), torch::zeros({10, 10, 4}, torch::kByte)}),
                   "image 1: expected uint8 [H, W, 3]");
  EXPECT_THROW_MSG(processor.preprocess({}), "no images given");
  auto fixed = CLIPImageProcessorConfig{};
  fixed.do_center_crop = false;
  EXPECT_THROW_MSG(CLIPImageProcessor(fixed).preprocess({torch::zeros({10, 10, 3}, torch::kByte),
                                                         torch::zeros({10, 20, 3}, torch::kByte)}),
                   "image 1 becomes");
}

}  // namespace
}  // namespace mm
