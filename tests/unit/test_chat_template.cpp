// Qwen2-VL / Qwen2.5-VL chat template against transformers' apply_chat_template with the
// official Jinja template (oracle: chat_template.py), and message-parsing errors.
#include <fstream>

#include "mm/core/json_config.h"
#include "mm/tokenizer/chat_template.h"
#include "mm/tokenizer/model_chat_template.h"
#include "testing.h"

namespace {

using nlohmann::json;

TEST(ChatTemplate, MatchesTransformersOnEveryConversation) {
  const json records = mm::read_json_file(mm::testing::golden_dir("chat_template") / "conversations.json");
  ASSERT_GE(records.size(), 40u);
  for (const auto& record : records) {
    const std::string name = record["name"];
    const bool generation = record["add_generation_prompt"], vision_id = record["add_vision_id"];
    SCOPED_TRACE(name + (generation ? " +generation" : "") + (vision_id ? " +vision_id" : ""));
    const auto messages = mm::parse_messages(record["messages"], name);
    EXPECT_EQ(mm::render_qwen2_vl_chat(messages, generation, vision_id), record["expected"].get<std::string>());
  }
}

// A model directory's own template is the one rendered (ModelChatTemplate), through our Jinja
// interpreter, wherever the directory keeps it: the official template gives transformers' text on
// every conversation, and a fine-tuned model's template (another system prompt) gives its own
// text, not the built-in one's. A directory with none falls back to the built-in template.
TEST(ModelChatTemplate, TheModelDirectorysOwnTemplateRendersAsTransformers) {
  const auto golden = mm::testing::golden_dir("chat_template");
  const auto dir = mm::testing::temp_dir("model_chat_template");
  const auto official = dir / "official";
  std::filesystem::create_directories(official);
  std::filesystem::copy_file(golden / "qwen2_vl_chat_template.jinja", official / "chat_template.jinja",
                             std::filesystem::copy_options::overwrite_existing);
  const auto from_official = mm::ModelChatTemplate::from_dir(official);
  EXPECT_FALSE(from_official.is_builtin());
  EXPECT_EQ(from_official.source(), (official / "chat_template.jinja").string());
  int checked = 0;
  for (const auto& record : mm::read_json_file(golden / "conversations.json")) {
    if (record["add_vision_id"].get<bool>()) continue;  // a keyword the commands do not pass
    const std::string name = record["name"];
    SCOPED_TRACE(name);
    EXPECT_EQ(from_official.render(mm::parse_messages(record["messages"], name), record["add_generation_prompt"]),
              record["expected"].get<std::string>());
    ++checked;
  }
  EXPECT_GE(checked, 20);

  const json custom = mm::read_json_file(golden / "custom_template.json");
  const std::string custom_text = custom["template"];
  // Where transformers finds it: tokenizer_config.json (a string, or the "default" of a list),
  // chat_template.json.
  const auto in_config = dir / "in_tokenizer_config", in_list = dir / "in_list", in_json = dir / "in_json";
  for (const auto& d : {in_config, in_list, in_json}) std::filesystem::create_directories(d);
  std::ofstream(in_config / "tokenizer_config.json") << json{{"chat_template", custom_text}, {"eos_token", "<|im_end|>"}}.dump();
  std::ofstream(in_list / "tokenizer_config.json")
      << json{{"chat_template", json::array({json{{"name", "tool_use"}, {"template", "{{ 'tools' }}"}},
                                             json{{"name", "default"}, {"template", custom_text}}})}}
             .dump();
  std::ofstream(in_json / "chat_template.json") << json{{"chat_template", custom_text}}.dump();
  for (const auto& d : {in_config, in_list, in_json}) {
    SCOPED_TRACE(d.filename().string());
    const auto from_dir = mm::ModelChatTemplate::from_dir(d);
    for (const auto& record : custom["cases"]) {
      const auto messages = mm::parse_messages(record["messages"], record["name"].get<std::string>());
      const std::string rendered = from_dir.render(messages, record["add_generation_prompt"]);
      EXPECT_EQ(rendered, record["expected"].get<std::string>()) << record["name"];
      if (messages.front().role != "system") {
        EXPECT_NE(rendered.find("You are a careful radiologist."), std::string::npos);
        EXPECT_NE(rendered, mm::render_qwen2_vl_chat(messages, record["add_generation_prompt"]));
      }
    }
  }

  const auto none = dir / "none";
  std::filesystem::create_directories(none);
  const auto builtin = mm::ModelChatTemplate::from_dir(none);
  EXPECT_TRUE(builtin.is_builtin());
  const auto hello = mm::parse_messages(json::parse(R"([{"role": "user", "content": "hi"}])"), "hello");
  EXPECT_EQ(builtin.render(hello, true), mm::render_qwen2_vl_chat(hello, true));
  EXPECT_THROW_MSG(from_official.render({}, true), "no messages to render");

  const auto broken = dir / "broken";
  std::filesystem::create_directories(broken);
  std::ofstream(broken / "chat_template.jinja") << "{{ messages[0].content }}\n{% if %}";
  EXPECT_THROW_MSG(mm::ModelChatTemplate::from_dir(broken), "chat_template.jinja:2");
  std::ofstream(broken / "chat_template.jinja", std::ios::trunc) << "{{ messages | wordwrap }}";
  EXPECT_THROW_MSG(mm::ModelChatTemplate::from_dir(broken), "unsupported filter 'wordwrap'");
}

TEST(ChatTemplate, ParsesPartsAndSources) {
  const auto messages = mm::parse_messages(json::parse(R"([
    {"role": "user", "content": [
      {"type": "image_url", "image_url": {"url": "https://x/a.jpg"}},
      {"type": "image", "path": "/img/b.png"},
      {"video": "c.mp4"},
      {"type": "text", "text": "hi"}]},
    {"role": "assistant", "content": "plain"}])"), "test");
  ASSERT_EQ(messages.size(), 2u);
  ASSERT_EQ(messages[0].content.size(), 4u);
  EXPECT_EQ(messages[0].content[0].kind, mm::ContentPart::Kind::image);
  EXPECT_EQ(messages[0].content[0].source, "https://x/a.jpg");
  EXPECT_EQ(messages[0].content[1].source, "/img/b.png");
  EXPECT_EQ(messages[0].content[2].kind, mm::ContentPart::Kind::video);
  EXPECT_EQ(messages[0].content[2].source, "c.mp4");
  EXPECT_EQ(messages[0].content[3].kind, mm::ContentPart::Kind::text);
  EXPECT_EQ(messages[0].content[3].text, "hi");
  EXPECT_EQ(messages[1].role, "assistant");
  ASSERT_EQ(messages[1].content.size(), 1u);
  EXPECT_EQ(messages[1].content[0].text, "plain");
}

TEST(ChatTemplate, ParsesFiles) {
  const auto dir = mm::testing::temp_dir("chat_template_files");
  std::ofstream(dir / "list.json") << R"([{"role": "user", "content": "a"}])";
  std::ofstream(dir / "object.json") << R"({"messages": [{"role": "user", "content": "b"}]})";
  EXPECT_EQ(mm::parse_messages_file(dir / "list.json").at(0).content.at(0).text, "a");
  EXPECT_EQ(mm::parse_messages_file(dir / "object.json").at(0).content.at(0).text, "b");
  std::ofstream(dir / "bad.json") << R"([{"role": "user"}])";
  EXPECT_THROW_MSG(mm::parse_messages_file(dir / "bad.json"), "bad.json: messages[0].content: missing");
  std::ofstream(dir / "broken.json") << "[{";
  EXPECT_THROW_MSG(mm::parse_messages_file(dir / "broken.json"), "broken.json: malformed JSON");
}

TEST(ChatTemplate, MalformedMessagesNameIndexAndField) {
  const std::vector<std::pair<std::string, std::string>> broken = {
      {R"({"role": "user"})", "chat.json: messages: expected an array"},
      {R"([{"role": "user", "content": "a"}, "text"])", "chat.json: messages[1]: expected an object"},
      {R"([{"content": "a"}])", "chat.json: messages[0].role: missing"},
      {R"([{"role": 3, "content": "a"}])", "chat.json: messages[0].role: expected a string, got 3"},
      {R"([{"role": "", "content": "a"}])", "chat.json: messages[0].role: must not be empty"},
      {R"([{"role": "user", "content": null}])", "chat.json: messages[0].content: missing"},
      {R"([{"role": "user", "content": 5}])", "chat.json: messages[0].content: expected a string or an array"},
      {R"([{"role": "user", "content": ["hi"]}])", "chat.json: messages[0].content[0]: expected an object"},
      {R"([{"role": "user", "content": [{"type": "text", "text": 1}]}])",
       "chat.json: messages[0].content[0].text: expected a string, got 1"},
      {R"([{"role": "user", "content": [{"type": "text"}]}])",
       "chat.json: messages[0].content[0]: unsupported content part of type \"text\""},
      {R"([{"role": "user", "content": [{"type": "audio", "audio": "x.wav"}]}])",
       "chat.json: messages[0].content[0]: unsupported content part of type \"audio\""},
      {R"([{"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "image"}]}])",
       "chat.json: messages[1].content[1]: image part without a source"},
      {R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"uri": "x"}}]}])",
       "chat.json: messages[0].content[0].image_url.url: missing"},
      {R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": 1}}]}])",
       "chat.json: messages[0].content[0].image_url.url: expected a string"},
      {R"([{"role": "user", "content": [{"type": "video", "video": ["f1.jpg", "f2.jpg"]}]}])",
       "chat.json: messages[0].content[0].video: expected a string"},
  };
  for (const auto& [text, message] : broken) {
    SCOPED_TRACE(text);
    EXPECT_THROW_MSG(mm::parse_messages(json::parse(text), "chat.json"), message);
  }
  EXPECT_THROW_MSG(mm::render_qwen2_vl_chat({}, true), "no messages");
}

}  // namespace
