// Training data: records in the three layouts encode to exactly what transformers'
// Qwen2_5_VLProcessor + get_rope_index give, targets cover the assistant turns (with tools through
// the model's own template: transformers' assistant mask), collation
// layouts, the sampler's determinism and resumability, and the threaded loader (same batches
// for any worker count, exact resume, skip accounting, clean shutdown).
#include <chrono>
#include <fstream>
#include <future>
#include <numeric>
#include <random>

#include <ATen/Parallel.h>

#include "mm/core/json_config.h"
#include "mm/data/loader.h"
#include "testing.h"

namespace fs = std::filesystem;
using mm::testing::golden_dir;

namespace {

struct Golden {
  nlohmann::json cases;
  std::vector<std::string> names;
  fs::path dir;
  std::shared_ptr<mm::SafetensorsFile> tensors;
  std::optional<mm::Tokenizer> tokenizer;
  std::optional<mm::Qwen2VLProcessor> processor;
  mm::QwenVLConfig config;
};

const Golden& golden() {
  static const Golden g = [] {
    Golden g;
    g.dir = golden_dir("train_data");
    auto j = mm::read_json_file(g.dir / "cases.json");
    g.cases = j["cases"];
    g.names = j["names"].get<std::vector<std::string>>();
    g.tensors = mm::SafetensorsFile::open(g.dir / "tensors.safetensors");
    g.tokenizer = mm::Tokenizer::from_dir(g.dir / "model");
    g.processor = mm::Qwen2VLProcessor::from_pretrained(g.dir / "model");
    g.config = mm::QwenVLConfig::from_file(g.dir / "model" / "config.json");
    return g;
  }();
  return g;
}

mm::SampleEncoder make_encoder(mm::SampleEncoderOptions options = {}) {
  if (options.max_seq_len == 2048) options.max_seq_len = 4096;
  return mm::SampleEncoder(*golden().tokenizer, *golden().processor, golden().config, options);
}

// Decoded text of each maximal run of targets != -100 (the tokens they predict).
std::vector<std::string> target_spans(const mm::TrainSample& s) {
  std::vector<std::string> spans;
  std::vector<int64_t> run;
  const auto targets = s.targets.accessor<int64_t, 1>();
  for (int64_t p = 0; p < s.length(); ++p) {
    if (targets[p] != mm::kIgnoreIndex) {
      run.push_back(targets[p]);
    } else if (!run.empty()) {
      spans.push_back(golden().tokenizer->decode(run));
      run.clear();
    }
  }
  if (!run.empty()) spans.push_back(golden().tokenizer->decode(run));
  return spans;
}

mm::Conversation conv(std::vector<mm::ChatMessage> messages, int64_t index = 0) {
  mm::Conversation c;
  c.index = index;
  c.messages = std::move(messages);
  return c;
}

mm::ChatMessage text_message(const std::string& role, const std::string& text) {
  return {role, {{mm::ContentPart::Kind::text, text, ""}}};
}

mm::SkipReason reason_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const mm::SampleError& e) {
    return e.reason();
  }
  ADD_FAILURE() << "expected a SampleError";
  return mm::SkipReason::malformed_record;
}

class RecordForm : public ::testing::TestWithParam<std::string> {};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Encoding parity with the reference processor, for each record layout.

TEST_P(RecordForm, EncodesLikeQwen2_5_VLProcessorAndGetRopeIndex) {
  const auto& g = golden();
  const auto file = mm::ConversationFile::open(g.dir / GetParam());
  ASSERT_EQ(file.size(), g.names.size());
  const auto encoder = make_encoder();
  const auto& t = *g.tensors;
  for (size_t i = 0; i < g.names.size(); ++i) {
    const std::string name = g.names[i];
    SCOPED_TRACE(GetParam() + " / " + name);
    const auto& c = g.cases.at(name);
    const mm::Conversation conversation = file.get(i);
    EXPECT_EQ(conversation.index, static_cast<int64_t>(i));
    EXPECT_EQ(conversation.type, c["type"].get<std::string>());
    EXPECT_EQ(mm::render_qwen2_vl_chat(conversation.messages, false), c["prompt"].get<std::string>());

    const mm::TrainSample s = encoder.encode(conversation);
    const auto ids = c["input_ids"].get<std::vector<int64_t>>();
    ASSERT_EQ(s.length(), static_cast<int64_t>(ids.size()));
    EXPECT_TRUE(torch::equal(s.input_ids, torch::tensor(ids)));
    EXPECT_TRUE(torch::equal(s.position_ids, t.tensor(name + ".position_ids")));
    auto check = [&](const char* key, const torch::Tensor& ours, double tol) {
      const std::string k = name + "." + key;
      if (!t.contains(k)) {
        EXPECT_FALSE(ours.defined()) << k << " should be absent";
        return;
      }
      ASSERT_TRUE(ours.defined()) << k;
      EXPECT_LE(mm::testing::max_abs_diff(ours, t.tensor(k)), tol) << k;
    };
    check("pixel_values", s.pixel_values, 1e-5);
    check("image_grid_thw", s.image_grid_thw, 0);
    check("pixel_values_videos", s.pixel_values_videos, 1e-5);
    check("video_grid_thw", s.video_grid_thw, 0);
    EXPECT_EQ(s.second_per_grid_ts, c["second_per_grid_ts"].get<std::vector<double>>());

    // Targets: exactly the assistant contents, each with its <|im_end|>, shifted by one.
    std::vector<std::string> expected;
    for (const auto& a : c["assistant"]) expected.push_back(a.get<std::string>() + "<|im_end|>");
    EXPECT_EQ(target_spans(s), expected);
    const auto targets = s.targets.accessor<int64_t, 1>();
    const auto input = s.input_ids.accessor<int64_t, 1>();
    EXPECT_EQ(targets[s.length() - 1], mm::kIgnoreIndex);
    for (int64_t p = 0; p + 1 < s.length(); ++p)
      if (targets[p] != mm::kIgnoreIndex) {
        EXPECT_EQ(targets[p], input[p + 1]);
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, RecordForm, ::testing::Values("llava.jsonl", "sharegpt.json", "openai.jsonl"),
                         [](const auto& info) { return info.param.substr(0, info.param.find('.')); });

// ---------------------------------------------------------------------------------------------
// Conversations with tools through the model's own template (the published Qwen3-VL Instruct one):
// the ids equal the processor's apply_chat_template(messages, tools=...), and the supervised
// tokens equal transformers' assistant mask (each reply's content, tool calls included, and its
// <|im_end|>), in the OpenAI layout (tool_calls, role "tool", a tools list) and LLaMA-Factory's
// (function_call / observation turns, tools as a JSON string).
class ToolRecordForm : public ::testing::TestWithParam<std::string> {};

TEST_P(ToolRecordForm, EncodesLikeTheProcessorWithToolsAndMasksLikeTransformers) {
  const auto& g = golden();
  const auto cases = mm::read_json_file(g.dir / "tool_cases.json");
  const auto tensors = mm::SafetensorsFile::open(g.dir / "tool_tensors.safetensors");
  const auto dir = g.dir / "model_tools";
  mm::SampleEncoderOptions options;
  options.max_seq_len = 4096;
  const mm::SampleEncoder encoder(*g.tokenizer, *g.processor, g.config, options, mm::ModelChatTemplate::from_dir(dir));
  const auto file = mm::ConversationFile::open(g.dir / GetParam());
  const bool sharegpt = GetParam() == "tools_sharegpt.json";
  size_t checked = 0;
  for (size_t i = 0; i < file.size(); ++i) {
    // The ShareGPT file holds the cases LLaMA-Factory's layout can express, each naming itself.
    const std::string name = sharegpt ? mm::read_json_file(g.dir / GetParam())[i]["name"].get<std::string>()
                                      : cases["names"][i].get<std::string>();
    SCOPED_TRACE(GetParam() + " / " + name);
    const auto& c = cases["cases"].at(name);
    const mm::Conversation conversation = file.get(i);
    ASSERT_TRUE(conversation.tools.is_array());
    const mm::TrainSample s = encoder.encode(conversation);
    const auto ids = c["input_ids"].get<std::vector<int64_t>>();
    const auto mask = c["assistant_mask"].get<std::vector<int64_t>>();
    ASSERT_EQ(s.length(), static_cast<int64_t>(ids.size()));
    EXPECT_TRUE(torch::equal(s.input_ids, torch::tensor(ids)));
    const auto targets = s.targets.accessor<int64_t, 1>();
    int64_t supervised = 0;
    for (int64_t p = 0; p + 1 < s.length(); ++p) {
      EXPECT_EQ(targets[p] != mm::kIgnoreIndex, mask[static_cast<size_t>(p + 1)] == 1) << "position " << p + 1;
      supervised += targets[p] != mm::kIgnoreIndex;
    }
    EXPECT_EQ(supervised, std::accumulate(mask.begin(), mask.end(), int64_t{0}));
    if (tensors->contains(name + ".pixel_values")) {
      EXPECT_LE(mm::testing::max_abs_diff(s.pixel_values, tensors->tensor(name + ".pixel_values")), 1e-5);
      EXPECT_TRUE(torch::equal(s.image_grid_thw, tensors->tensor(name + ".image_grid_thw")));
    }
    ++checked;
  }
  EXPECT_EQ(checked, sharegpt ? 2u : 3u);
}

INSTANTIATE_TEST_SUITE_P(Layouts, ToolRecordForm, ::testing::Values("tools_openai.jsonl", "tools_sharegpt.json"),
                         [](const auto& info) { return info.param.substr(0, info.param.find('.')); });

// A template that renders a reply by what follows it (Qwen3's drops the thinking of replies before
// the last user query): the loss covers each reply as the whole conversation renders it, not as
// a render of the conversation up to that reply would.
TEST(SampleEncoder, RepliesAreMaskedAsTheWholeConversationRendersThem) {
  const auto dir = mm::testing::temp_dir("thinking_template");
  fs::copy(golden().dir / "model", dir, fs::copy_options::recursive);
  std::ofstream(dir / "chat_template.jinja")
      << "{%- set ns = namespace(last_query=-1) %}"
         "{%- for m in messages %}{%- if m.role == 'user' %}{%- set ns.last_query = loop.index0 %}{%- endif %}{%- endfor %}"
         "{%- for m in messages %}"
         "{%- if m.role == 'assistant' and loop.index0 < ns.last_query and '</think>' in m.content %}"
         "{{- '<|im_start|>assistant\n' + m.content.split('</think>')[-1].lstrip('\n') + '<|im_end|>\n' }}"
         "{%- else %}{{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{%- endif %}"
         "{%- endfor %}";
  mm::SampleEncoderOptions options;
  options.max_seq_len = 4096;
  const mm::SampleEncoder encoder(*golden().tokenizer, *golden().processor, golden().config, options,
                                  mm::ModelChatTemplate::from_dir(dir));
  auto message = [](const std::string& role, const std::string& text) {
    mm::ChatMessage m = text_message(role, text);
    m.content_form = mm::ChatMessage::ContentForm::string;
    return m;
  };
  const auto s = encoder.encode(conv({message("user", "2+2?"), message("assistant", "<think>\nadd</think>\n\nFour."),
                                      message("user", "And 3+3?"), message("assistant", "<think>\nadd</think>\n\nSix.")}));
  EXPECT_EQ(target_spans(s), (std::vector<std::string>{"Four.<|im_end|>", "<think>\nadd</think>\n\nSix.<|im_end|>"}));
  const auto* ids = s.input_ids.contiguous().data_ptr<int64_t>();
  const std::string text = golden().tokenizer->decode(std::vector<int64_t>(ids, ids + s.length()));
  EXPECT_EQ(text.find("<think>\nadd</think>\n\nFour."), std::string::npos) << text;
}

TEST(SampleEncoder, EveryTokenAfterTheFirstIsATargetWithoutAssistantOnly) {
  mm::SampleEncoderOptions options;
  options.loss_on_assistant_only = false;
  const auto s = make_encoder(options).encode(mm::ConversationFile::open(golden().dir / "openai.jsonl").get(0));
  const int64_t len = s.length();
  EXPECT_TRUE(torch::equal(s.targets.narrow(0, 0, len - 1), s.input_ids.narrow(0, 1, len - 1)));
  EXPECT_EQ(s.targets[len - 1].item<int64_t>(), mm::kIgnoreIndex);
}

TEST(SampleEncoder, LeadingWhitespaceInAnAnswerKeepsIdsExactAndSupervisesAtMostTheHeaderNewline) {
  // "\n" + "\n\n" is one pre-token, so BPE may merge the header's newline into the content.
  const std::string answer = "\n\n  Indented answer.";
  const auto c = conv({text_message("user", "Hi"), text_message("assistant", answer)});
  const auto s = make_encoder().encode(c);
  const std::string full = mm::render_qwen2_vl_chat(c.messages, false);
  EXPECT_TRUE(torch::equal(s.input_ids, torch::tensor(golden().tokenizer->encode(full))));
  const auto spans = target_spans(s);
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_TRUE(spans[0] == answer + "<|im_end|>" || spans[0] == "\n" + answer + "<|im_end|>") << spans[0];
}

TEST(SampleEncoder, LengthEstimateBoundsImagesAndIsExactForText) {
  const auto file = mm::ConversationFile::open(golden().dir / "openai.jsonl");
  const auto encoder = make_encoder();
  for (size_t i : {0, 1, 3}) {
    const auto c = file.get(i);
    const int64_t estimate = encoder.estimate_length(c), actual = encoder.encode(c).length();
    if (i == 3) {
      EXPECT_EQ(estimate, actual);
    } else {
      EXPECT_GE(estimate, actual) << i;
    }
  }
}

TEST(SampleEncoder, ReasonsForUnusableSamples) {
  const auto file = mm::ConversationFile::open(golden().dir / "openai.jsonl");
  const auto image_case = file.get(0);
  mm::SampleEncoderOptions small;
  small.max_seq_len = 20;
  EXPECT_EQ(reason_of([&] { make_encoder(small).encode(image_case); }), mm::SkipReason::too_long);
  // Cutting the tail is fine for text, never through an image.
  small.truncation = mm::Truncation::right;
  EXPECT_EQ(reason_of([&] { make_encoder(small).encode(image_case); }), mm::SkipReason::too_long);
  const auto text_case = file.get(3);
  const auto full = make_encoder().encode(text_case);
  small.max_seq_len = full.length() - 3;
  const auto cut = make_encoder(small).encode(text_case);
  EXPECT_EQ(cut.length(), full.length() - 3);
  EXPECT_TRUE(torch::equal(cut.input_ids, full.input_ids.narrow(0, 0, cut.length())));
  EXPECT_TRUE(torch::equal(cut.position_ids, full.position_ids.narrow(1, 0, cut.length())));
  EXPECT_EQ(cut.targets[cut.length() - 1].item<int64_t>(), mm::kIgnoreIndex);
  // Cut before the answer starts: nothing left to learn.
  small.max_seq_len = 25;
  EXPECT_EQ(reason_of([&] { make_encoder(small).encode(text_case); }), mm::SkipReason::no_supervised_tokens);

  EXPECT_EQ(reason_of([&] { make_encoder().encode(conv({text_message("user", "Only a question")})); }),
            mm::SkipReason::no_supervised_tokens);
  EXPECT_EQ(reason_of([&] {
              make_encoder().encode(conv({text_message("user", "<|image_pad|> sneaked in"), text_message("assistant", "x")}));
            }),
            mm::SkipReason::placeholder_mismatch);
  auto missing = image_case;
  missing.messages[0].content[0].source = (golden().dir / "media" / "nope.png").string();
  EXPECT_EQ(reason_of([&] { make_encoder().encode(missing); }), mm::SkipReason::missing_media);
}

TEST(Conversation, RecordErrorsNameTheRecordAndField) {
  const fs::path root = "/data";
  auto parse = [&](const char* json) { return mm::parse_conversation(nlohmann::ordered_json::parse(json), root, "x.jsonl:7"); };
  try {
    parse(R"({"image": "a.jpg", "conversations": [{"from": "human", "value": "<image><image>hi"}]})");
    ADD_FAILURE() << "expected placeholder_mismatch";
  } catch (const mm::SampleError& e) {
    EXPECT_EQ(e.reason(), mm::SkipReason::placeholder_mismatch);
    EXPECT_NE(std::string(e.what()).find("x.jsonl:7"), std::string::npos) << e.what();
  }
  EXPECT_THROW_MSG(parse(R"({"conversations": [{"from": "robot", "value": "hi"}]})"), "x.jsonl:7: turn 0: unknown role 'robot'");
  EXPECT_THROW_MSG(parse(R"({"messages": [{"role": "user"}]})"), "x.jsonl:7");
  EXPECT_THROW_MSG(parse(R"({"images": [3], "messages": [{"role": "user", "content": "hi"}]})"), "images[0]");
  EXPECT_THROW_MSG(parse(R"([1, 2])"), "x.jsonl:7");
  // Absolute paths stay, relative ones resolve against the media root.
  const auto c = parse(R"({"images": ["/abs/a.png", "b.png"], "messages": [{"role": "user", "content": "<image> and <image>"}]})");
  ASSERT_EQ(c.messages[0].content.size(), 3u);
  EXPECT_EQ(c.messages[0].content[0].source, "/abs/a.png");
  EXPECT_EQ(c.messages[0].content[1].text, " and ");
  EXPECT_EQ(c.messages[0].content[2].source, "/data/b.png");
  EXPECT_THROW_MSG(mm::ConversationFile::open("/nonexistent/train.jsonl"), "/nonexistent/train.jsonl");
  // Tools and tool turns.
  EXPECT_THROW_MSG(parse(R"({"tools": {"name": "w"}, "messages": [{"role": "user", "content": "hi"}]})"),
                   "x.jsonl:7: tools: expected a list of tool schemas (or a JSON string of one)");
  EXPECT_THROW_MSG(parse(R"({"tools": "[{oops", "messages": [{"role": "user", "content": "hi"}]})"),
                   "x.jsonl:7: tools: the string is not JSON");
  EXPECT_THROW_MSG(parse(R"({"tools": [3], "messages": [{"role": "user", "content": "hi"}]})"), "tools[0]: expected an object");
  EXPECT_THROW_MSG(parse(R"({"conversations": [{"from": "function_call", "value": "get_weather Paris"}]})"),
                   "x.jsonl:7: turn 0: function_call: the value is not JSON");
  EXPECT_THROW_MSG(parse(R"({"conversations": [{"from": "function_call", "value": "{\"arguments\": {}}"}]})"),
                   "turn 0: function_call[0]: expected {\"name\"");
  EXPECT_THROW_MSG(parse(R"({"messages": [{"role": "assistant", "content": null}]})"),
                   "turn 0: \"content\" / \"value\": missing (only a turn with tool_calls may leave it out)");
  // LLaMA-Factory's layout becomes the messages templates read, key order kept.
  const auto t = parse(R"({"tools": "[{\"name\": \"w\", \"b\": 1, \"a\": 2}]", "conversations": [
      {"from": "human", "value": "hi"}, {"from": "function_call", "value": "{\"name\": \"w\", \"arguments\": {\"z\": 1, \"y\": 2}}"},
      {"from": "observation", "value": "ok"}, {"from": "gpt", "value": "done", "loss": false}]})");
  EXPECT_EQ(t.tools.dump(), R"([{"name":"w","b":1,"a":2}])");
  ASSERT_EQ(t.messages.size(), 4u);
  EXPECT_EQ(t.messages[1].role, "assistant");
  EXPECT_EQ(t.messages[1].fields.dump(), R"({"tool_calls":[{"type":"function","function":{"name":"w","arguments":{"z":1,"y":2}}}]})");
  EXPECT_EQ(t.messages[1].content_form, mm::ChatMessage::ContentForm::string);
  EXPECT_EQ(t.messages[2].role, "tool");
  EXPECT_EQ(t.messages[3].fields.dump(), R"({"loss":false})");
  EXPECT_TRUE(parse(R"({"tools": "", "messages": [{"role": "user", "content": "hi"}]})").tools.is_null());
}

// ---------------------------------------------------------------------------------------------
// Collation.

namespace {

mm::TrainSample fake_sample(int64_t index, int64_t len, int64_t start_id) {
  mm::TrainSample s;
  s.index = index;
  s.input_ids = torch::arange(start_id, start_id + len, torch::kInt64);
  s.targets = torch::full({len}, mm::kIgnoreIndex, torch::kInt64);
  s.targets.narrow(0, 0, len - 1).copy_(s.input_ids.narrow(0, 1, len - 1));
  s.targets[0] = mm::kIgnoreIndex;
  s.position_ids = torch::arange(len, torch::kInt64).unsqueeze(0).repeat({3, 1}) + 10 * index;
  return s;
}

}  // namespace

TEST(Collate, PackedConcatenatesWithBoundariesAndRestartingPositions) {
  const std::vector<mm::TrainSample> samples = {fake_sample(0, 5, 100), fake_sample(1, 3, 200), fake_sample(2, 4, 300)};
  const auto b = mm::collate_packed(samples);
  EXPECT_EQ(b.cu_seqlens, (std::vector<int64_t>{0, 5, 8, 12}));
  EXPECT_EQ(b.inputs.input_ids.sizes(), torch::IntArrayRef({1, 12}));
  EXPECT_FALSE(b.inputs.attention_mask.defined());
  EXPECT_EQ(b.position_ids.sizes(), torch::IntArrayRef({3, 1, 12}));
  for (size_t k = 0; k < samples.size(); ++k) {
    const int64_t at = b.cu_seqlens[k], len = samples[k].length();
    EXPECT_TRUE(torch::equal(b.inputs.input_ids[0].narrow(0, at, len), samples[k].input_ids));
    EXPECT_TRUE(torch::equal(b.targets[0].narrow(0, at, len), samples[k].targets));
    EXPECT_TRUE(torch::equal(b.position_ids.select(1, 0).narrow(1, at, len), samples[k].position_ids));
    EXPECT_EQ(b.position_ids[0][0][at].item<int64_t>(), 10 * static_cast<int64_t>(k));
  }
  EXPECT_EQ(b.sample_indices, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(b.num_tokens, 12);
  EXPECT_EQ(b.num_target_tokens, (5 - 2) + (3 - 2) + (4 - 2));  // first and last of each ignored
}

TEST(Collate, PaddedPadsOnTheRight) {
  const auto b = mm::collate_padded({fake_sample(0, 5, 100), fake_sample(1, 3, 200)}, /*pad=*/7);
  EXPECT_TRUE(b.cu_seqlens.empty());
  EXPECT_EQ(b.inputs.input_ids.sizes(), torch::IntArrayRef({2, 5}));
  EXPECT_TRUE(torch::equal(b.inputs.input_ids[1], torch::tensor({200, 201, 202, 7, 7}, torch::kInt64)));
  EXPECT_TRUE(torch::equal(b.inputs.attention_mask[1], torch::tensor({1, 1, 1, 0, 0}, torch::kInt64)));
  EXPECT_TRUE(torch::equal(b.inputs.attention_mask[0], torch::ones({5}, torch::kInt64)));
  EXPECT_TRUE(torch::equal(b.targets[1], torch::tensor({-100, 202, -100, -100, -100}, torch::kInt64)));
  EXPECT_TRUE(torch::equal(b.position_ids[2][1], torch::tensor({10, 11, 12, 0, 0}, torch::kInt64)));
  EXPECT_EQ(b.num_tokens, 8);
  EXPECT_EQ(b.num_target_tokens, 3 + 1);
}

TEST(Collate, VisionTensorsConcatenateInSampleOrder) {
  const auto file = mm::ConversationFile::open(golden().dir / "openai.jsonl");
  const auto encoder = make_encoder();
  std::vector<mm::TrainSample> samples = {encoder.encode(file.get(2)), encoder.encode(file.get(0)),
                                          encoder.encode(file.get(1))};
  const auto b = mm::collate_packed(samples);
  EXPECT_TRUE(torch::equal(b.inputs.image_grid_thw,
                           torch::cat({samples[0].image_grid_thw, samples[1].image_grid_thw, samples[2].image_grid_thw})));
  EXPECT_TRUE(torch::equal(b.inputs.pixel_values,
                           torch::cat({samples[0].pixel_values, samples[1].pixel_values, samples[2].pixel_values})));
  EXPECT_TRUE(torch::equal(b.inputs.video_grid_thw, samples[0].video_grid_thw));
  EXPECT_EQ(b.inputs.second_per_grid_ts, samples[0].second_per_grid_ts);
  EXPECT_EQ(b.types, (std::vector<std::string>{"video", "caption", "compare"}));
}

// ---------------------------------------------------------------------------------------------
// Sampler.

TEST(Sampler, DeterministicPermutationPerEpochAndSeed) {
  mm::SamplerOptions o;
  o.seed = 42;
  const mm::Sampler a(std::vector<int64_t>(100, 1), o), b(std::vector<int64_t>(100, 1), o);
  EXPECT_EQ(a.order(0), b.order(0));
  EXPECT_EQ(a.order(3), b.order(3));
  EXPECT_NE(a.order(0), a.order(1));
  auto sorted = a.order(0);
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> all(100);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(sorted, all);
  EXPECT_NE(a.order(0), all);
  o.seed = 43;
  EXPECT_NE(mm::Sampler(std::vector<int64_t>(100, 1), o).order(0), a.order(0));
  o.shuffle = false;
  EXPECT_EQ(mm::Sampler(std::vector<int64_t>(100, 1), o).order(5), all);
  // The documented algorithm (seed_seq of seed/epoch words, mt19937_64, rejection sampling,
  // Fisher-Yates from the back), recomputed here: a change would silently alter resumed runs.
  std::seed_seq seq{7u, 0u, 2u, 0u};
  std::mt19937_64 rng(seq);
  std::vector<int64_t> expected(10);
  std::iota(expected.begin(), expected.end(), 0);
  for (uint64_t i = expected.size(); i > 1; --i) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % i;
    uint64_t x;
    do x = rng(); while (x >= limit);
    std::swap(expected[i - 1], expected[x % i]);
  }
  mm::SamplerOptions pinned;
  pinned.seed = 7;
  EXPECT_EQ(mm::Sampler(std::vector<int64_t>(10, 1), pinned).order(2), expected);
}

TEST(Sampler, LengthGroupingSortsEachMegaBatchLongestFirst) {
  std::vector<int64_t> lengths(103);
  for (size_t i = 0; i < lengths.size(); ++i) lengths[i] = static_cast<int64_t>((i * 37) % 101);
  mm::SamplerOptions o;
  o.seed = 1;
  o.group_by_length = true;
  o.group_size = 10;
  const auto order = mm::Sampler(lengths, o).order(0);
  o.group_by_length = false;
  const auto shuffled = mm::Sampler(lengths, o).order(0);
  ASSERT_EQ(order.size(), lengths.size());
  for (size_t start = 0; start < order.size(); start += 10) {
    const size_t end = std::min(order.size(), start + 10);
    std::vector<int64_t> mine(order.begin() + start, order.begin() + end);
    std::vector<int64_t> theirs(shuffled.begin() + start, shuffled.begin() + end);
    for (size_t k = start + 1; k < end; ++k) EXPECT_GE(lengths[order[k - 1]], lengths[order[k]]);
    std::sort(mine.begin(), mine.end());
    std::sort(theirs.begin(), theirs.end());
    EXPECT_EQ(mine, theirs) << "mega-batch " << start / 10 << " holds other samples than the shuffle";
  }
}

TEST(Sampler, RanksGetDisjointShardsOfEqualSize) {
  mm::SamplerOptions o;
  o.seed = 3;
  o.world = 3;
  std::vector<int64_t> seen;
  for (int64_t r = 0; r < 3; ++r) {
    o.rank = r;
    const auto mine = mm::Sampler(std::vector<int64_t>(9, 1), o).order(2);
    EXPECT_EQ(mine.size(), 3u);
    seen.insert(seen.end(), mine.begin(), mine.end());
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  o.rank = 1;
  EXPECT_EQ(mm::Sampler(std::vector<int64_t>(10, 1), o).order(0).size(), 4u);  // padded by wrapping
}

TEST(Sampler, StateRoundTripsThroughJson) {
  const mm::SamplerState s{3, 17, {}};
  EXPECT_EQ(mm::SamplerState::from_json(s.to_json()), s);
  EXPECT_THROW_MSG(mm::SamplerState::from_json(nlohmann::json{{"epoch", 1}}, "ckpt/data.json"), "ckpt/data.json.cursor");
}

// ---------------------------------------------------------------------------------------------
// Loader.

namespace {

// A jsonl dataset of cheap samples (text and images from the golden media), absolute paths.
fs::path write_dataset(const std::string& name, const std::vector<std::string>& extra_lines, int good = 14) {
  const fs::path dir = mm::testing::temp_dir(name);
  const std::string png = (golden().dir / "media" / "shapes.png").string();
  const std::string jpg = (golden().dir / "media" / "tall.jpg").string();
  std::ofstream out(dir / "train.jsonl");
  for (int i = 0; i < good; ++i) {
    nlohmann::json r;
    std::string words;
    for (int w = 0; w < 1 + (i * 7) % 13; ++w) words += " the model";
    r["conversations"] = {{{"from", "human"}, {"value", (i % 3 == 0 ? "<image>" : "") + std::string("Question") + words}},
                          {{"from", "gpt"}, {"value", "Answer" + std::to_string(i) + words}}};
    if (i % 3 == 0) r["image"] = i % 2 ? png : jpg;
    r["type"] = i % 2 ? "odd" : "even";
    out << r.dump() << "\n";
    if (static_cast<size_t>(i) < extra_lines.size()) out << extra_lines[i] << "\n";
  }
  return dir / "train.jsonl";
}

std::vector<mm::TrainBatch> drain(mm::DataLoader& loader, int max_batches = 1 << 30) {
  std::vector<mm::TrainBatch> out;
  while (static_cast<int>(out.size()) < max_batches) {
    auto b = loader.next();
    if (!b) break;
    out.push_back(std::move(*b));
  }
  return out;
}

void expect_same_batches(const std::vector<mm::TrainBatch>& a, const std::vector<mm::TrainBatch>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    SCOPED_TRACE("batch " + std::to_string(k));
    EXPECT_EQ(a[k].sample_indices, b[k].sample_indices);
    EXPECT_TRUE(torch::equal(a[k].inputs.input_ids, b[k].inputs.input_ids));
    EXPECT_TRUE(torch::equal(a[k].targets, b[k].targets));
    EXPECT_TRUE(torch::equal(a[k].position_ids, b[k].position_ids));
    EXPECT_EQ(a[k].cu_seqlens, b[k].cu_seqlens);
    EXPECT_EQ(a[k].inputs.pixel_values.defined(), b[k].inputs.pixel_values.defined());
    if (a[k].inputs.pixel_values.defined()) {
      EXPECT_TRUE(torch::equal(a[k].inputs.pixel_values, b[k].inputs.pixel_values));
    }
  }
}

mm::LoaderOptions loader_options(bool packing, int workers) {
  mm::LoaderOptions o;
  o.micro_batch_size = 3;
  o.packing = packing;
  o.max_seq_len = 160;
  o.pad_token_id = 0;
  o.num_workers = workers;
  o.prefetch = 4;
  return o;
}

mm::Sampler sampler_for(const mm::ConversationFile& file, uint64_t seed = 5) {
  mm::SamplerOptions o;
  o.seed = seed;
  return mm::Sampler(std::vector<int64_t>(file.size(), 1), o);
}

}  // namespace

TEST(DataLoader, SameBatchesForAnyWorkerCountAndExactResume) {
  const auto file = mm::ConversationFile::open(write_dataset("loader_same", {}));
  const auto encoder = make_encoder();
  for (bool packing : {false, true}) {
    SCOPED_TRACE(packing ? "packed" : "padded");
    mm::DataLoader one(file, encoder, sampler_for(file), loader_options(packing, 1));
    mm::DataLoader three(file, encoder, sampler_for(file), loader_options(packing, 3));
    mm::DataLoader inline_(file, encoder, sampler_for(file), loader_options(packing, 0));
    const auto a = drain(one), b = drain(three), c = drain(inline_);
    ASSERT_GE(a.size(), 3u);
    expect_same_batches(a, b);
    expect_same_batches(a, c);
    std::vector<int64_t> seen;
    for (const auto& batch : a) {
      seen.insert(seen.end(), batch.sample_indices.begin(), batch.sample_indices.end());
      if (packing) {
        EXPECT_EQ(batch.inputs.input_ids.size(0), 1);
        EXPECT_LE(batch.cu_seqlens.back(), 160);
      } else {
        EXPECT_LE(batch.inputs.input_ids.size(0), 3);
      }
    }
    EXPECT_EQ(seen, sampler_for(file).order(0));

    // Stop after two batches, resume from the saved state in a new loader: the rest is identical.
    mm::DataLoader first(file, encoder, sampler_for(file), loader_options(packing, 2));
    drain(first, 2);
    const auto state = mm::SamplerState::from_json(first.after_taking({first.taken_after_last_batch()}).to_json());
    mm::DataLoader resumed(file, encoder, sampler_for(file), loader_options(packing, 2), state);
    const auto rest = drain(resumed);
    expect_same_batches(rest, std::vector<mm::TrainBatch>(a.begin() + 2, a.end()));

    // Next epoch: another order, same set.
    resumed.start_epoch();
    EXPECT_EQ(resumed.epoch(), 1);
    const auto epoch1 = drain(resumed);
    std::vector<int64_t> seen1;
    for (const auto& batch : epoch1) seen1.insert(seen1.end(), batch.sample_indices.begin(), batch.sample_indices.end());
    EXPECT_EQ(seen1, sampler_for(file).order(1));
  }
}

TEST(DataLoader, SkipsAndCountsEveryKindOfBrokenSample) {
  const fs::path media = golden().dir / "media";
  const fs::path dir = mm::testing::temp_dir("loader_broken_media");
  {
    std::ifstream in(media / "tall.jpg", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(dir / "corrupt.jpg", std::ios::binary) << bytes.substr(0, 120);
  }
  std::string long_text;
  for (int i = 0; i < 300; ++i) long_text += " word";
  const std::vector<std::string> broken = {
      R"({"conversations": [{"from": "human", "value": "hi"}, )",  // malformed JSON
      nlohmann::json{{"image", (dir / "missing.png").string()},
                     {"conversations", {{{"from", "human"}, {"value", "<image>hi"}}, {{"from", "gpt"}, {"value", "a"}}}}}
          .dump(),
      nlohmann::json{{"image", (dir / "corrupt.jpg").string()},
                     {"conversations", {{{"from", "human"}, {"value", "<image>hi"}}, {{"from", "gpt"}, {"value", "a"}}}}}
          .dump(),
      nlohmann::json{{"conversations", {{{"from", "human"}, {"value", "hi"}}, {{"from", "gpt"}, {"value", long_text}}}}}
          .dump(),
      nlohmann::json{{"image", (media / "shapes.png").string()},
                     {"conversations",
                      {{{"from", "human"}, {"value", "<image><image>hi"}}, {{"from", "gpt"}, {"value", "a"}}}}}
          .dump(),
      nlohmann::json{{"conversations", {{{"from", "human"}, {"value", "just asking"}}}}}.dump(),
  };
  const auto path = write_dataset("loader_broken", broken, 8);
  const auto file = mm::ConversationFile::open(path);
  ASSERT_EQ(file.size(), 14u);
  mm::SampleEncoderOptions eo;
  eo.max_seq_len = 200;
  const auto encoder = make_encoder(eo);

  mm::DataLoader loader(file, encoder, sampler_for(file), loader_options(false, 3));
  const auto batches = drain(loader);
  int64_t samples = 0;
  for (const auto& b : batches) samples += static_cast<int64_t>(b.sample_indices.size());
  EXPECT_EQ(samples, 8);
  const auto& skips = loader.skips();
  for (auto r : {mm::SkipReason::malformed_record, mm::SkipReason::missing_media, mm::SkipReason::corrupt_media,
                 mm::SkipReason::too_long, mm::SkipReason::placeholder_mismatch, mm::SkipReason::no_supervised_tokens})
    EXPECT_EQ(skips.count(r), 1) << mm::skip_reason_name(r);
  EXPECT_EQ(skips.total(), 6);
  EXPECT_EQ(skips.to_json()["corrupt_media"].get<int64_t>(), 1);

  // Two more epochs meet the same 6 records again: still 6 bad records, not 18 skip events.
  for (int epoch = 1; epoch <= 2; ++epoch) {
    loader.start_epoch();
    drain(loader);
  }
  EXPECT_EQ(loader.skips().total(), 6);
  // A resumed run gets the records from the checkpoint and goes on counting records.
  mm::SkipCounts resumed;
  resumed.merge_records(loader.skips().records_json(), "trainer_state.json: skipped_records");
  EXPECT_EQ(resumed.total(), 6);
  resumed.add(mm::SkipReason::too_long, 1000, "another record");
  EXPECT_EQ(resumed.total(), 7);
  EXPECT_THROW(resumed.merge_records(nlohmann::json{{"no_such_reason", {1}}}, "x"), mm::Error);

  // fail_on_error: the first bad one in sampler order throws, naming its line.
  auto options = loader_options(false, 2);
  options.fail_on_error = true;
  mm::SamplerOptions in_order;
  in_order.shuffle = false;
  mm::DataLoader strict(file, encoder, mm::Sampler(std::vector<int64_t>(file.size(), 1), in_order), options);
  try {
    drain(strict);
    ADD_FAILURE() << "expected a SampleError";
  } catch (const mm::SampleError& e) {
    EXPECT_EQ(e.reason(), mm::SkipReason::malformed_record);
    EXPECT_NE(std::string(e.what()).find("train.jsonl:2"), std::string::npos) << e.what();
  }
}

TEST(DataLoader, DestructionMidEpochDoesNotHang) {
  const auto file = mm::ConversationFile::open(write_dataset("loader_stop", {}));
  const auto encoder = make_encoder();
  auto done = std::async(std::launch::async, [&] {
    { mm::DataLoader idle(file, encoder, sampler_for(file), loader_options(false, 3)); }
    mm::DataLoader loader(file, encoder, sampler_for(file), loader_options(true, 3));
    loader.next();
    loader.start_epoch(4);  // abandons in-flight work
    loader.next();
  });
  EXPECT_EQ(done.wait_for(std::chrono::seconds(120)), std::future_status::ready);
}

TEST(DataLoader, WorkersRunTensorOpsSerially) {
  const int before = at::get_num_threads();
  int in_worker = -1;
  std::thread([&] {
    mm::serial_intra_op_on_this_thread();
    in_worker = at::get_num_threads();
  }).join();
  EXPECT_EQ(in_worker, 1);
  EXPECT_EQ(at::get_num_threads(), before);  // other threads keep their parallelism
}
