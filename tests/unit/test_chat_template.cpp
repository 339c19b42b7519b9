// Qwen2-VL / Qwen2.5-VL chat template against transformers' apply_chat_template with the
// official Jinja template (oracle: chat_template.py), and message-parsing errors.
#include <fstream>

#include "mm/core/json_config.h"
#include "mm/tokenizer/chat_template.h"
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
