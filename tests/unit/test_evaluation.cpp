// Exact-match evaluation: the matching rule, splitting a conversation at its last answer, and
// `mmtrain eval` on a random-weight tiny-shapes model: its predictions equal `mmtrain infer`'s
// and transformers' greedy answers, and the counts are right on a file whose references are in
// part the model's own answers.
#include <fstream>
#include <sstream>

#include "mm/core/json_config.h"
#include "mm/data/synth_shapes.h"
#include "mm/tasks/evaluation.h"
#include "mm/tasks/vlm_chat.h"
#include "testing.h"

namespace fs = std::filesystem;
using mm::testing::kMmtrain;
using mm::testing::kPython;
using mm::testing::kSourceDir;
using mm::testing::run_command;

namespace {

constexpr int64_t kNewTokens = 8;

// A tiny-shapes model with random weights (saved by transformers), a shapes dataset, and the
// greedy answers transformers gives for the first test records.
struct Fixture {
  fs::path root, model, data;
  nlohmann::json hf_answers;
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture x;
    x.root = mm::testing::temp_dir("evaluation");
    x.model = x.root / "model";
    x.data = x.root / "shapes";
    mm::ShapesOptions o;
    o.train = 0;
    o.test = 12;
    o.seed = 11;
    mm::write_shapes_dataset(x.data, o);
    std::ofstream(x.root / "make.py") << R"(
import json, shutil, sys
import torch
from PIL import Image
from transformers import AutoConfig, AutoProcessor, Qwen2_5_VLForConditionalGeneration
template, out, data, new_tokens = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
shutil.copytree(template, out)
torch.manual_seed(0)
model = Qwen2_5_VLForConditionalGeneration(AutoConfig.from_pretrained(out)).eval()
with torch.no_grad():  # the default init is tiny; wider weights make answers depend on the inputs
    for p in model.parameters():
        p.normal_(0, 0.2 if p.dim() > 1 else 0.05)
model.save_pretrained(out)
processor = AutoProcessor.from_pretrained(out)
answers = []
for line in open(data + "/test.jsonl").readlines()[:4]:
    r = json.loads(line)
    messages = [{"role": "user", "content": [{"type": "image"},
                 {"type": "text", "text": r["messages"][0]["content"].replace("<image>", "")}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=[text], images=[Image.open(data + "/" + r["images"][0])], return_tensors="pt")
    with torch.no_grad():
        ids = model.generate(**inputs, do_sample=False, max_new_tokens=new_tokens)
    answers.append(processor.tokenizer.decode(ids[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))
json.dump(answers, open(out + "/../hf_answers.json", "w"))
)";
    const auto [rc, out] =
        run_command(kPython + " " + (x.root / "make.py").string() + " " +
                    (kSourceDir / "examples" / "qwen2.5vl" / "tiny-shapes").string() + " " + x.model.string() +
                    " " + x.data.string() + " " + std::to_string(kNewTokens));
    if (rc != 0) throw std::runtime_error("making the random tiny-shapes model failed: " + out);
    x.hf_answers = mm::read_json_file(x.root / "hf_answers.json");
    return x;
  }();
  return f;
}

mm::QwenVLChat& chat() {
  static mm::QwenVLChat c(fixture().model);
  return c;
}

mm::EvalResult evaluate(const fs::path& data, int64_t limit = 0, const fs::path& root = {}) {
  mm::EvalOptions o;
  o.max_new_tokens = kNewTokens;
  o.limit = limit;
  return mm::evaluate_exact_match(chat(), mm::ConversationFile::open(data, root), o);
}

std::string quote(const std::string& s) { return "'" + s + "'"; }

std::string eval_command(const std::string& args) {
  return kMmtrain + " eval --model " + fixture().model.string() + " --threads 1 --max-new-tokens " +
         std::to_string(kNewTokens) + " " + args;
}

nlohmann::json last_json_line(const std::string& out) {
  std::istringstream in(out);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return nlohmann::json::parse(last);
}

}  // namespace

TEST(ExactMatch, TrimsAndIgnoresAsciiCase) {
  EXPECT_TRUE(mm::exact_match("red", "red"));
  EXPECT_TRUE(mm::exact_match("  Top Left\n", "top left"));
  EXPECT_TRUE(mm::exact_match("\t", ""));
  EXPECT_FALSE(mm::exact_match("top  left", "top left"));
  EXPECT_FALSE(mm::exact_match("red.", "red"));
  EXPECT_FALSE(mm::exact_match("reds", "red"));
  EXPECT_FALSE(mm::exact_match("", "red"));
  EXPECT_TRUE(mm::exact_match("ÉTÉ", "ÉTÉ"));
  EXPECT_FALSE(mm::exact_match("été", "ÉTÉ"));  // case folding is ASCII only
}

TEST(SplitLastAnswer, PromptIsEverythingBeforeTheLastAssistantMessage) {
  using K = mm::ContentPart::Kind;
  mm::Conversation c;
  c.messages = {{"system", {{K::text, "be brief", ""}}},
                {"user", {{K::image, "", "a.png"}, {K::text, "colour?", ""}}},
                {"assistant", {{K::text, "red", ""}}},
                {"user", {{K::text, "and the shape?", ""}}},
                {"assistant", {{K::text, "a ", ""}, {K::text, "circle", ""}}},
                {"user", {{K::text, "unanswered", ""}}}};
  const auto [prompt, reference] = mm::split_last_answer(c, "f.jsonl:3");
  EXPECT_EQ(reference, "a circle");
  ASSERT_EQ(prompt.size(), 4u);
  EXPECT_EQ(prompt[3].content[0].text, "and the shape?");
  EXPECT_EQ(prompt[1].content[0].source, "a.png");

  c.messages = {{"user", {{K::text, "hi", ""}}}};
  EXPECT_THROW_MSG(mm::split_last_answer(c, "f.jsonl:3"), "f.jsonl:3: no assistant message");
  c.messages = {{"assistant", {{K::text, "hi", ""}}}};
  EXPECT_THROW_MSG(mm::split_last_answer(c, "f.jsonl:4"), "f.jsonl:4: the assistant answer has no prompt");
}

TEST(Evaluate, PredictionsEqualInferAndTransformers) {
  const auto& f = fixture();
  const auto result = evaluate(f.data / "test.jsonl", 4);
  ASSERT_EQ(result.predictions.size(), 4u);
  ASSERT_EQ(f.hf_answers.size(), 4u);
  std::ifstream in(f.data / "test.jsonl");
  for (size_t i = 0; i < 4; ++i) {
    std::string line;
    std::getline(in, line);
    const auto record = nlohmann::json::parse(line);
    const auto& p = result.predictions[i];
    EXPECT_EQ(p.index, static_cast<int64_t>(i));
    EXPECT_EQ(p.type, record["type"]);
    EXPECT_EQ(p.reference, record["messages"][1]["content"]);
    EXPECT_EQ(p.prediction, f.hf_answers[i].get<std::string>()) << "record " << i;

    std::string question = record["messages"][0]["content"];
    question = question.substr(std::string("<image>").size());
    const auto [rc, out] = run_command(
        kMmtrain + " infer --greedy --threads 1 --max-new-tokens " + std::to_string(kNewTokens) + " --model " +
            f.model.string() + " --image " + (f.data / record["images"][0].get<std::string>()).string() +
            " --prompt " + quote(question),
        /*with_stderr=*/false);
    ASSERT_EQ(rc, 0) << out;
    EXPECT_EQ(out, p.prediction + "\n") << "record " << i;
  }
}

// References set to the model's own answers (some re-cased and padded) count as correct, the
// others as wrong, per type and overall, in the library and on the command line.
TEST(Evaluate, CountsOnACraftedFile) {
  const auto& f = fixture();
  const auto answers = evaluate(f.data / "test.jsonl", 8);
  const auto dir = mm::testing::temp_dir("eval_crafted");
  std::ofstream out(dir / "crafted.jsonl");
  const std::vector<std::string> types{"even", "odd"};
  int64_t expected_correct = 0;
  std::map<std::string, int64_t> correct_by_type;
  std::ifstream in(f.data / "test.jsonl");
  for (size_t i = 0; i < 8; ++i) {
    std::string line;
    std::getline(in, line);
    auto record = nlohmann::json::parse(line);
    std::string reference = answers.predictions[i].prediction;
    const bool correct = i % 3 != 2;
    if (!correct) reference += " not this";
    if (i % 3 == 1) {
      for (char& c : reference) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      reference = "  " + reference + "\n";
    }
    record["messages"][1]["content"] = reference;
    if (i == 7) record.erase("type");
    else record["type"] = types[i % 2];
    expected_correct += correct;
    correct_by_type[i == 7 ? "" : types[i % 2]] += correct;
    out << record.dump() << "\n";
  }
  out.close();

  // Images are relative to the dataset, not to the crafted file: --data-root.
  const auto result = evaluate(dir / "crafted.jsonl", 0, f.data);
  EXPECT_EQ(result.overall.total, 8);
  EXPECT_EQ(result.overall.correct, expected_correct);
  ASSERT_EQ(result.by_type.size(), 3u);
  EXPECT_EQ(result.by_type.at("even").total, 4);
  EXPECT_EQ(result.by_type.at("odd").total, 3);
  EXPECT_EQ(result.by_type.at("").total, 1);
  for (const auto& [type, n] : correct_by_type) EXPECT_EQ(result.by_type.at(type).correct, n) << type;
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(result.predictions[i].correct, i % 3 != 2) << i;

  const auto [rc, stdout_text] =
      run_command(eval_command("--data " + (dir / "crafted.jsonl").string() + " --data-root " + f.data.string() +
                               " --output " + (dir / "predictions.jsonl").string()),
                  /*with_stderr=*/false);
  ASSERT_EQ(rc, 0) << stdout_text;
  EXPECT_NE(stdout_text.find("type"), std::string::npos);
  EXPECT_NE(stdout_text.find("(none)"), std::string::npos) << stdout_text;
  const auto summary = last_json_line(stdout_text);
  EXPECT_EQ(summary, result.summary_json());
  EXPECT_EQ(summary["correct"], expected_correct);
  EXPECT_DOUBLE_EQ(summary["accuracy"].get<double>(), expected_correct / 8.0);
  EXPECT_EQ(summary["by_type"]["odd"]["total"], 3);

  std::ifstream lines(dir / "predictions.jsonl");
  size_t n = 0;
  for (std::string line; std::getline(lines, line); ++n) {
    const auto p = nlohmann::json::parse(line);
    ASSERT_LT(n, 8u);
    EXPECT_EQ(p["index"], n);
    EXPECT_EQ(p["prediction"], answers.predictions[n].prediction);
    EXPECT_EQ(p["correct"], n % 3 != 2);
    EXPECT_EQ(p["reference"], result.predictions[n].reference);
  }
  EXPECT_EQ(n, 8u);
  EXPECT_FALSE(fs::exists(dir / "predictions.jsonl.tmp"));
}

TEST(EvalCommand, LimitScoresTheFirstRecords) {
  const auto [rc, out] = run_command(eval_command("--limit 3 --data " + (fixture().data / "test.jsonl").string()),
                                     /*with_stderr=*/false);
  ASSERT_EQ(rc, 0) << out;
  const auto summary = last_json_line(out);
  EXPECT_EQ(summary["total"], 3);
  EXPECT_EQ(summary["by_type"].size(), 3u);  // color, shape, position
}

TEST(EvalCommand, ClearErrors) {
  const auto dir = mm::testing::temp_dir("eval_errors");
  auto [rc, out] = run_command(eval_command("--data " + (dir / "missing.jsonl").string()));
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--data"), std::string::npos) << out;
  EXPECT_NE(out.find("missing.jsonl"), std::string::npos) << out;

  std::ofstream(dir / "no_answer.jsonl")
      << R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}]})" << "\n"
      << R"({"messages": [{"role": "user", "content": "only a question"}]})" << "\n";
  std::tie(rc, out) = run_command(eval_command("--data " + (dir / "no_answer.jsonl").string()));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("mmtrain: error: no_answer.jsonl:2: no assistant message to take as the reference answer"),
            std::string::npos)
      << out;
  EXPECT_THROW_MSG(evaluate(dir / "no_answer.jsonl"), "no_answer.jsonl:2: no assistant message");

  std::tie(rc, out) = run_command(eval_command("--data " + (fixture().data / "test.jsonl").string() +
                                               " --output " + (dir / "nodir" / "p.jsonl").string()));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("does not exist"), std::string::npos) << out;
}
