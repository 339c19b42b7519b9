// The synthetic shapes dataset and the tiny-shapes model template: PNG encoding read back by our
// decoder and by PIL, labels that agree with the pixels, byte-identical output per seed, the
// `mmtrain data synth` command, and the template accepted by transformers with a tokenizer that
// our mm::Tokenizer reproduces.
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "mm/core/json_config.h"
#include "mm/media/image_decode.h"
#include "mm/media/image_encode.h"
#include "mm/data/synth_shapes.h"
#include "mm/tokenizer/bpe_tokenizer.h"
#include "mm/tokenizer/chat_template.h"
#include "test_files.h"
#include "testing.h"

namespace fs = std::filesystem;
using mm::testing::read_file;
using mm::testing::read_jsonl;
using mm::testing::file_tree;
using mm::testing::kMmtrain;
using mm::testing::kPython;
using mm::testing::kSourceDir;
using mm::testing::run_command;

namespace {

const fs::path kTemplate = kSourceDir / "examples" / "qwen2.5vl" / "tiny-shapes";

std::pair<int, std::string> run_python(const fs::path& dir, const std::string& script, const std::string& args = "") {
  const fs::path file = dir / "snippet.py";
  std::ofstream(file) << script;
  return run_command(kPython + " " + file.string() + " " + args);
}

const fs::path& small_dataset() {
  static const fs::path dir = [] {
    auto d = mm::testing::temp_dir("shapes_small") / "data";
    mm::ShapesOptions o;
    o.train = 120;
    o.test = 40;
    o.seed = 7;
    mm::write_shapes_dataset(d, o);
    return d;
  }();
  return dir;
}

}  // namespace

TEST(WritePng, DecodesToTheSamePixelsWithOursAndPil) {
  const auto dir = mm::testing::temp_dir("write_png");
  torch::manual_seed(3);
  const auto rgb = torch::randint(0, 256, {37, 53, 3}, torch::kUInt8);
  mm::write_png(dir / "a.png", rgb);
  EXPECT_TRUE(torch::equal(mm::decode_image(dir / "a.png"), rgb));
  EXPECT_FALSE(fs::exists(dir / "a.png.tmp"));

  // A non-contiguous view is written as the pixels it shows.
  const auto wide = torch::randint(0, 256, {20, 3, 31}, torch::kUInt8).permute({2, 0, 1});
  mm::write_png(dir / "b.png", wide);
  EXPECT_TRUE(torch::equal(mm::decode_image(dir / "b.png"), wide));

  // PIL opens it as an 8-bit RGB PNG with the same pixels.
  std::ofstream(dir / "a.rgb", std::ios::binary)
      .write(reinterpret_cast<const char*>(rgb.contiguous().data_ptr<uint8_t>()), rgb.numel());
  const auto [rc, out] = run_python(dir, R"(
import sys
import numpy as np
from PIL import Image
img = Image.open(sys.argv[1] + "/a.png")
assert img.format == "PNG" and img.mode == "RGB" and img.size == (53, 37), (img.format, img.mode, img.size)
want = np.fromfile(sys.argv[1] + "/a.rgb", np.uint8).reshape(37, 53, 3)
assert (np.asarray(img) == want).all(), "pixels differ"
print("ok")
)", dir.string());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("ok"), std::string::npos) << out;
}

TEST(WritePng, RejectsBadTensorsAndPaths) {
  const auto dir = mm::testing::temp_dir("write_png_bad");
  EXPECT_THROW_MSG(mm::write_png(dir / "f.png", torch::zeros({4, 4, 3})), "uint8 [height, width, 3]");
  EXPECT_THROW_MSG(mm::write_png(dir / "g.png", torch::zeros({4, 4, 4}, torch::kUInt8)), "g.png");
  EXPECT_THROW_MSG(mm::write_png(dir / "h.png", torch::zeros({0, 4, 3}, torch::kUInt8)), "h.png");
  EXPECT_THROW_MSG(mm::write_png(dir / "no" / "such" / "x.png", torch::zeros({2, 2, 3}, torch::kUInt8)),
                   "x.png");
  EXPECT_FALSE(fs::exists(dir / "f.png"));
}

TEST(ShapesDataset, WritesTheDocumentedLayout) {
  const auto& dir = small_dataset();
  EXPECT_TRUE(fs::exists(dir / "README.txt"));
  const auto train = read_jsonl(dir / "train.jsonl");
  const auto test = read_jsonl(dir / "test.jsonl");
  ASSERT_EQ(train.size(), 120u);
  ASSERT_EQ(test.size(), 40u);
  const std::vector<std::string> types{"color", "shape", "position", "caption"};
  for (const auto& [split, records] : {std::pair{"train", &train}, std::pair{"test", &test}}) {
    for (size_t i = 0; i < records->size(); ++i) {
      const auto& r = (*records)[i];
      char name[64];
      std::snprintf(name, sizeof name, "images/%s/%06zu.png", split, i);
      ASSERT_EQ(r["images"], nlohmann::json::array({name})) << r;
      EXPECT_EQ(r["type"], types[i % 4]) << r;
      ASSERT_EQ(r["messages"].size(), 2u) << r;
      EXPECT_EQ(r["messages"][0]["role"], "user");
      EXPECT_EQ(r["messages"][0]["content"].get<std::string>().rfind("<image>", 0), 0u) << r;
      EXPECT_EQ(r["messages"][1]["role"], "assistant");
      const auto image = mm::decode_image(dir / name);
      EXPECT_EQ(image.sizes(), (std::vector<int64_t>{56, 56, 3}));
    }
  }
  // Every answer comes from the documented vocabulary, and every value appears.
  std::map<std::string, std::set<std::string>> answers;
  for (const auto& r : train) answers[r["type"]].insert(r["messages"][1]["content"].get<std::string>());
  const auto& c = mm::shapes_colors();
  const auto& k = mm::shapes_kinds();
  const auto& p = mm::shapes_positions();
  EXPECT_EQ(answers["color"], std::set<std::string>(c.begin(), c.end()));
  EXPECT_EQ(answers["shape"], std::set<std::string>(k.begin(), k.end()));
  EXPECT_EQ(answers["position"], std::set<std::string>(p.begin(), p.end()));
  EXPECT_GT(answers["caption"].size(), 10u);  // 30 caption records, 72 possible captions
}

// The labels say what the pixels show: shape pixels (the saturated ones; the background is grey)
// have one colour per colour name, lie in the named quadrant, and fill their bounding box as the
// named shape does (square ~1, circle ~pi/4, triangle ~1/2).
TEST(ShapesDataset, LabelsMatchThePixels) {
  const auto& dir = small_dataset();
  std::map<std::string, std::set<std::vector<int64_t>>> colour_rgb;
  const std::regex caption("a (\\w+) (\\w+) in the (\\w+ \\w+)");
  int64_t checked = 0;
  for (const char* split : {"train", "test"}) {
    for (const auto& r : read_jsonl(dir / (std::string(split) + ".jsonl"))) {
      const auto image = mm::decode_image(dir / r["images"][0].get<std::string>()).to(torch::kInt64);
      const auto spread = std::get<0>(image.max(2)) - std::get<0>(image.min(2));
      const auto mask = spread > 50;  // [56, 56]
      const auto grey = image.masked_select((~mask).unsqueeze(2).expand_as(image)).view({-1, 3});
      ASSERT_TRUE(torch::equal(grey.select(1, 0), grey.select(1, 1))) << "background is not grey";
      const auto shape = image.masked_select(mask.unsqueeze(2).expand_as(image)).view({-1, 3});
      ASSERT_GT(shape.size(0), 40) << r;
      const auto first = shape[0];
      ASSERT_TRUE(torch::equal(shape, first.expand_as(shape))) << "shape has several colours: " << r;
      const std::vector<int64_t> rgb(first.data_ptr<int64_t>(), first.data_ptr<int64_t>() + 3);

      const std::string type = r["type"], answer = r["messages"][1]["content"];
      std::string colour, kind, position;
      if (type == "color") colour = answer;
      if (type == "shape") kind = answer;
      if (type == "position") position = answer;
      if (type == "caption") {
        std::smatch m;
        ASSERT_TRUE(std::regex_match(answer, m, caption)) << answer;
        colour = m[1], kind = m[2], position = m[3];
      }
      if (!colour.empty()) colour_rgb[colour].insert(rgb);

      const auto ys = mask.any(1).nonzero().view(-1), xs = mask.any(0).nonzero().view(-1);
      const int64_t y0 = ys.min().item<int64_t>(), y1 = ys.max().item<int64_t>();
      const int64_t x0 = xs.min().item<int64_t>(), x1 = xs.max().item<int64_t>();
      if (!position.empty()) {
        const bool top = position.rfind("top", 0) == 0, left = position.find("left") != std::string::npos;
        EXPECT_TRUE(top ? y1 < 28 : y0 >= 28) << position << " rows " << y0 << ".." << y1;
        EXPECT_TRUE(left ? x1 < 28 : x0 >= 28) << position << " cols " << x0 << ".." << x1;
        EXPECT_GE(std::min(y1 - y0, x1 - x0), 14) << "the shape should fill most of its quadrant";
      }
      if (!kind.empty()) {
        const double fill = static_cast<double>(shape.size(0)) / ((y1 - y0 + 1) * (x1 - x0 + 1));
        const std::string seen = fill > 0.95 ? "square" : fill > 0.62 ? "circle" : "triangle";
        EXPECT_EQ(seen, kind) << "fill " << fill << " of " << r;
        if (kind == "triangle") EXPECT_LT(fill, 0.6);
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 160);
  // One colour per name, all six present and far apart.
  ASSERT_EQ(colour_rgb.size(), 6u);
  std::vector<std::vector<int64_t>> palette;
  for (const auto& [name, values] : colour_rgb) {
    ASSERT_EQ(values.size(), 1u) << name;
    palette.push_back(*values.begin());
  }
  for (size_t a = 0; a < palette.size(); ++a)
    for (size_t b = a + 1; b < palette.size(); ++b) {
      int64_t d2 = 0;
      for (int ch = 0; ch < 3; ++ch) d2 += (palette[a][ch] - palette[b][ch]) * (palette[a][ch] - palette[b][ch]);
      EXPECT_GT(d2, 100 * 100) << "colours " << a << " and " << b << " are too close";
    }
}

TEST(ShapesDataset, NoImageRepeatsWithinOrAcrossSplits) {
  const auto& dir = small_dataset();
  std::set<std::string> seen;
  for (const auto& [path, bytes] : file_tree(dir / "images")) {
    const auto pixels = mm::decode_image(dir / "images" / path);
    EXPECT_TRUE(seen.insert(std::string(static_cast<const char*>(pixels.data_ptr()), pixels.numel())).second)
        << path << " repeats an earlier image";
  }
  EXPECT_EQ(seen.size(), 160u);
}

TEST(ShapesDataset, SameSeedSameBytesOtherSeedOtherImages) {
  const auto dir = mm::testing::temp_dir("shapes_seed");
  mm::ShapesOptions o;
  o.train = 12;
  o.test = 8;
  o.image_size = 84;
  o.seed = 42;
  mm::write_shapes_dataset(dir / "a", o);
  mm::write_shapes_dataset(dir / "b", o);
  const auto a = file_tree(dir / "a");
  EXPECT_EQ(a.size(), 12u + 8u + 3u);
  EXPECT_EQ(a, file_tree(dir / "b"));
  // Rewriting into an existing directory gives the same files again.
  mm::write_shapes_dataset(dir / "a", o);
  EXPECT_EQ(a, file_tree(dir / "a"));
  o.seed = 43;
  mm::write_shapes_dataset(dir / "c", o);
  const auto c = file_tree(dir / "c");
  EXPECT_NE(a.at("images/train/000000.png"), c.at("images/train/000000.png"));
  EXPECT_NE(a.at("train.jsonl"), c.at("train.jsonl"));
  EXPECT_EQ(mm::decode_image(dir / "c" / "images" / "test" / "000007.png").size(0), 84);
}

TEST(ShapesDataset, BadOptionsAndOutputDirectoryAreErrors) {
  const auto dir = mm::testing::temp_dir("shapes_bad");
  mm::ShapesOptions o;
  o.image_size = 20;
  EXPECT_THROW_MSG(mm::write_shapes_dataset(dir / "x", o), "image_size must be in [28, 2048], got 20");
  o = {};
  o.train = -1;
  EXPECT_THROW_MSG(mm::write_shapes_dataset(dir / "x", o), "train must be >= 0");
  std::ofstream(dir / "file") << "not a directory";
  o = {};
  EXPECT_THROW_MSG(mm::write_shapes_dataset(dir / "file", o), "is not a directory");
}

TEST(DataSynthCommand, WritesWhatTheLibraryWrites) {
  const auto dir = mm::testing::temp_dir("synth_cli");
  const auto [rc, out] = run_command(kMmtrain + " data synth --kind shapes --out " + (dir / "cli").string() +
                                     " --train 10 --test 6 --image-size 56 --seed 5");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("10 train and 6 test records"), std::string::npos) << out;
  mm::ShapesOptions o;
  o.train = 10;
  o.test = 6;
  o.seed = 5;
  mm::write_shapes_dataset(dir / "lib", o);
  EXPECT_EQ(file_tree(dir / "cli"), file_tree(dir / "lib"));
}

TEST(DataSynthCommand, ClearErrors) {
  const auto dir = mm::testing::temp_dir("synth_cli_bad");
  auto [rc, out] = run_command(kMmtrain + " data synth --kind audio --out " + (dir / "v").string());
  EXPECT_EQ(rc, 2) << out;  // a usage error
  EXPECT_NE(out.find("mmtrain: error: --kind: audio not in {shapes,video}"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir / "v"));

  std::ofstream(dir / "file") << "x";
  std::tie(rc, out) = run_command(kMmtrain + " data synth --kind shapes --out " + (dir / "file").string());
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find((dir / "file").string() + ": exists and is not a directory"), std::string::npos) << out;

  std::tie(rc, out) = run_command(kMmtrain + " data synth --kind shapes --out " + (dir / "s").string() +
                                  " --image-size 7");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("image_size must be in [28, 2048], got 7"), std::string::npos) << out;

  std::tie(rc, out) = run_command(kMmtrain + " data synth --kind shapes");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--out is required"), std::string::npos) << out;
  std::tie(rc, out) = run_command(kMmtrain + " data");
  EXPECT_EQ(rc, 2) << out;
}

// The committed template is what its script makes today (so it cannot drift from the script).
TEST(TinyShapesTemplate, EqualsWhatTheScriptMakes) {
  auto committed = file_tree(kTemplate);
  committed.erase("README.md");
  const auto fresh = file_tree(mm::testing::golden_dir("make_tiny_shapes_model"));
  ASSERT_FALSE(fresh.empty());
  EXPECT_EQ(committed.size(), fresh.size());
  for (const auto& [name, bytes] : fresh) {
    ASSERT_TRUE(committed.count(name)) << name << " is not committed";
    EXPECT_EQ(committed.at(name), bytes) << name << " differs from the script's output";
  }
  for (const char* name : {"config.json", "tokenizer.json", "tokenizer_config.json", "preprocessor_config.json",
                           "generation_config.json", "chat_template.jinja"})
    EXPECT_TRUE(committed.count(name)) << name;
  for (const auto& [name, bytes] : committed) EXPECT_EQ(name.find("safetensors"), std::string::npos) << name;
}

// Our tokenizer gives `tokenizers`' ids for every conversation of the dataset, rendered with the
// chat template and the image placeholder expanded to its 4 tokens; the ids match config.json;
// each answer word is one token (the vocabulary was trained on this text).
TEST(TinyShapesTemplate, TokenizerMatchesTokenizersOnTheDatasetText) {
  const auto dir = mm::testing::temp_dir("shapes_tokens");
  const auto tokenizer = mm::Tokenizer::from_dir(kTemplate);
  const auto config = mm::read_json_file(kTemplate / "config.json");
  EXPECT_EQ(tokenizer.vocab_size(), config["text_config"]["vocab_size"].get<int64_t>());
  EXPECT_EQ(tokenizer.token_to_id("<|image_pad|>"), config["image_token_id"].get<int64_t>());
  EXPECT_EQ(tokenizer.token_to_id("<|video_pad|>"), config["video_token_id"].get<int64_t>());
  EXPECT_EQ(tokenizer.token_to_id("<|vision_start|>"), config["vision_start_token_id"].get<int64_t>());
  EXPECT_EQ(tokenizer.token_to_id("<|vision_end|>"), config["vision_end_token_id"].get<int64_t>());
  EXPECT_EQ(tokenizer.eos_token_id(), config["text_config"]["eos_token_id"].get<int64_t>());
  EXPECT_EQ(tokenizer.token_to_id("<|im_end|>"), tokenizer.eos_token_id());

  nlohmann::json texts = nlohmann::json::array();
  const std::string pads = "<|image_pad|><|image_pad|><|image_pad|><|image_pad|>";
  for (const char* split : {"train.jsonl", "test.jsonl"}) {
    for (const auto& r : read_jsonl(small_dataset() / split)) {
      std::string question = r["messages"][0]["content"];
      question = question.substr(std::string("<image>").size());
      const std::string answer = r["messages"][1]["content"];
      std::vector<mm::ChatMessage> messages{
          {"user", {{mm::ContentPart::Kind::image, "", "x.png"}, {mm::ContentPart::Kind::text, question, ""}}},
          {"assistant", {{mm::ContentPart::Kind::text, answer, ""}}}};
      std::string text = mm::render_qwen2_vl_chat(messages, false);
      text.replace(text.find("<|image_pad|>"), std::string("<|image_pad|>").size(), pads);
      texts.push_back(text);
      texts.push_back(answer);
      texts.push_back(question);
    }
  }
  std::ofstream(dir / "texts.json") << texts.dump();
  const auto [rc, out] = run_python(dir, R"(
import json, sys
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1] + "/tokenizer.json")
texts = json.load(open(sys.argv[2] + "/texts.json"))
json.dump([tok.encode(t).ids for t in texts], open(sys.argv[2] + "/ids.json", "w"))
)", kTemplate.string() + " " + dir.string());
  ASSERT_EQ(rc, 0) << out;
  const auto want = mm::read_json_file(dir / "ids.json");
  ASSERT_EQ(want.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto ids = tokenizer.encode(texts[i].get<std::string>());
    EXPECT_EQ(ids, want[i].get<std::vector<int64_t>>()) << texts[i];
    if (i % 3 == 1) {  // the answer
      const std::string a = texts[i];
      EXPECT_EQ(ids.size(), static_cast<size_t>(std::count(a.begin(), a.end(), ' ') + 1)) << a;
    }
    if (i % 3 == 0) {
      EXPECT_EQ(std::count(ids.begin(), ids.end(), *tokenizer.token_to_id("<|image_pad|>")), 4);
    }
  }
}

// transformers loads the directory with AutoProcessor (a 56x56 dataset image becomes a 1x4x4
// grid and 4 image tokens) and builds and runs Qwen2_5_VLForConditionalGeneration from its config.
TEST(TinyShapesTemplate, TransformersAcceptsTheDirectory) {
  const auto dir = mm::testing::temp_dir("shapes_hf");
  const auto [rc, out] = run_python(dir, R"(
import json, sys
import torch
from PIL import Image
from transformers import AutoConfig, AutoProcessor, Qwen2_5_VLForConditionalGeneration
template, data = sys.argv[1], sys.argv[2]
processor = AutoProcessor.from_pretrained(template)
assert type(processor).__name__ == "Qwen2_5_VLProcessor", type(processor)
assert type(processor.image_processor).__name__ == "Qwen2VLImageProcessor", type(processor.image_processor)
record = json.loads(open(data + "/train.jsonl").readline())
question = record["messages"][0]["content"].replace("<image>", "")
messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]},
            {"role": "assistant", "content": record["messages"][1]["content"]}]
text = processor.apply_chat_template(messages, tokenize=False)
inputs = processor(text=[text], images=[Image.open(data + "/" + record["images"][0])], return_tensors="pt")
assert inputs["image_grid_thw"].tolist() == [[1, 4, 4]], inputs["image_grid_thw"]
config = AutoConfig.from_pretrained(template)
assert (inputs["input_ids"] == config.image_token_id).sum() == 4
torch.manual_seed(0)
model = Qwen2_5_VLForConditionalGeneration(config).eval()
with torch.no_grad():
    logits = model(**inputs).logits
assert logits.shape == (1, inputs["input_ids"].shape[1], config.text_config.vocab_size), logits.shape
assert torch.isfinite(logits).all()
print("ok", sum(p.numel() for p in model.parameters()))
)", kTemplate.string() + " " + small_dataset().string());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("ok "), std::string::npos) << out;
}
