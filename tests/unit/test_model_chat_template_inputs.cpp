// What apply_chat_template is given besides the template, through the product path: a model
// directory holding a published template (Qwen2-VL, Qwen3, Qwen3-VL, Qwen3.8), the messages as a
// conversation file states them (tool calls, reasoning content, content left out), the tool
// schemas and the keyword arguments (enable_thinking, ...) as --tools and --chat-kwarg pass them:
// ModelChatTemplate renders every published case of the Jinja oracle (jinja_chat_templates.py)
// byte for byte as transformers did.
#include <fstream>
#include <nlohmann/json.hpp>

#include "mm/core/json_config.h"
#include "mm/tokenizer/model_chat_template.h"
#include "unit/testing.h"

namespace mm {
namespace {

using ojson = nlohmann::ordered_json;

// The keyword arguments of a case: its context less what transformers sets itself and the
// tokenizer's special tokens (which the directory's tokenizer_config.json gives).
ojson kwargs_of(const ojson& context) {
  ojson kwargs = ojson::object();
  for (const auto& [key, value] : context.items())
    if (key != "messages" && key != "tools" && key != "documents" && key != "add_generation_prompt" &&
        !key.ends_with("_token"))
      kwargs[key] = value;
  return kwargs;
}

// kwargs as --chat-kwarg writes them: NAME=JSON.
std::vector<std::string> as_settings(const ojson& kwargs) {
  std::vector<std::string> out;
  for (const auto& [key, value] : kwargs.items()) out.push_back(key + "=" + value.dump());
  return out;
}

TEST(ModelChatTemplateInputs, PublishedTemplatesRenderEveryCaseLikeTransformers) {
  const auto golden = read_ordered_json_file(testing::golden_dir("jinja_chat_templates") / "cases.json");
  const auto root = testing::temp_dir("model_chat_template_inputs");
  std::map<std::string, int> checked;
  for (const auto& c : golden["cases"]) {
    const std::string name = c["template"];
    if (name.rfind("feature_", 0) == 0) continue;  // the language's pieces: test_jinja_template
    SCOPED_TRACE(name + " / " + c["name"].get<std::string>());
    const auto dir = root / name;
    if (!std::filesystem::exists(dir)) {
      std::filesystem::create_directories(dir);
      std::ofstream(dir / "chat_template.jinja") << golden["templates"][name].get<std::string>();
      ojson config = ojson::object();
      for (const auto& [key, value] : c["context"].items())
        if (key.ends_with("_token")) config[key] = value;
      std::ofstream(dir / "tokenizer_config.json") << config.dump();
    }
    auto chat_template = ModelChatTemplate::from_dir(dir);
    const auto& context = c["context"];
    chat_template.set_kwargs(parse_chat_kwargs(as_settings(kwargs_of(context)), "--chat-kwarg"));
    const auto messages = parse_messages(context["messages"], "case");
    EXPECT_EQ(chat_template.render(messages, context["add_generation_prompt"].get<bool>(), context["tools"]),
              c["expected"].get<std::string>());
    ++checked[name];
  }
  for (const char* name : {"qwen2_vl", "qwen3", "qwen3_vl_instruct", "qwen3_8", "qwen3_5"})
    EXPECT_GE(checked[name], 40) << name;
}

TEST(ModelChatTemplateInputs, KwargsAndToolsAreCheckedAndNamed) {
  const auto settings = parse_chat_kwargs({"enable_thinking=false", "effort=medium", "n=3", "list=[1,\"a\"]"}, "--chat-kwarg");
  EXPECT_EQ(settings.dump(), R"({"enable_thinking":false,"effort":"medium","n":3,"list":[1,"a"]})");
  EXPECT_THROW_MSG(parse_chat_kwargs({"enable_thinking"}, "--chat-kwarg"), "--chat-kwarg enable_thinking: expected NAME=VALUE");
  EXPECT_THROW_MSG(parse_chat_kwargs({"=1"}, "--chat-kwarg"), "--chat-kwarg =1: expected NAME=VALUE");

  const auto dir = testing::temp_dir("model_chat_template_kwargs");
  std::ofstream(dir / "chat_template.jinja") << "{{ messages[0].content }}{% if enable_thinking is false %}/no{% endif %}"
                                                "{{ tools|tojson if tools else '' }}";
  auto own = ModelChatTemplate::from_dir(dir);
  EXPECT_THROW_MSG(own.set_kwargs(ojson{{"tools", ojson::array()}}), "chat template variable 'tools': set by mmtrain itself");
  EXPECT_THROW_MSG(own.set_kwargs(ojson{{"messages", 1}}), "'messages': set by mmtrain itself");
  const std::vector<ChatMessage> hi = parse_messages(ojson::parse(R"([{"role": "user", "content": "hi"}])"), "t");
  own.set_kwargs(ojson{{"enable_thinking", false}});
  EXPECT_EQ(own.render(hi, false), "hi/no");
  // Tool schemas keep their key order, as Python's dicts do.
  own.set_tools(ojson::parse(R"([{"type": "function", "function": {"name": "w", "a": 1}}])"));
  EXPECT_EQ(own.render(hi, false), R"(hi/no[{"type": "function", "function": {"name": "w", "a": 1}}])");
  EXPECT_THROW_MSG(own.set_tools(ojson{{"name", "w"}}), "tools: expected a list of tool schemas");

  // The built-in template reads no variables and lists no tools: refused, not ignored.
  auto builtin = ModelChatTemplate::from_dir(testing::temp_dir("model_chat_template_none"));
  ASSERT_TRUE(builtin.is_builtin());
  EXPECT_THROW_MSG(builtin.set_kwargs(ojson{{"enable_thinking", false}}), "ships no chat template of its own");
  EXPECT_THROW_MSG(builtin.set_tools(ojson::array()), "built-in Qwen2-VL template has no tool support");
  builtin.set_kwargs(ojson::object());
  builtin.set_tools(nullptr);
  EXPECT_NE(builtin.render(hi, true).find("<|im_start|>assistant\n"), std::string::npos);
}

TEST(ModelChatTemplateInputs, ConversationFilesKeepToolsAndOtherFields) {
  const auto dir = testing::temp_dir("chat_file_tools");
  std::ofstream(dir / "chat.json") << R"({"messages": [
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "w", "arguments": {"z": 1, "a": 2}}}]},
      {"role": "tool", "content": "21", "tool_call_id": "c1"},
      {"role": "assistant", "content": null, "reasoning_content": "r", "tool_calls": []}],
    "tools": [{"type": "function", "function": {"name": "w"}}]})";
  const auto chat = read_chat_file(dir / "chat.json");
  ASSERT_EQ(chat.messages.size(), 4u);
  EXPECT_EQ(chat.tools.dump(), R"([{"type":"function","function":{"name":"w"}}])");
  const auto json = chat_messages_json(chat.messages);
  EXPECT_FALSE(json[1].contains("content"));
  EXPECT_EQ(json[1]["tool_calls"][0]["function"]["arguments"].dump(), R"({"z":1,"a":2})");  // the file's order
  EXPECT_EQ(json[2]["tool_call_id"], "c1");
  EXPECT_TRUE(json[3]["content"].is_null());
  EXPECT_EQ(json[3]["reasoning_content"], "r");
  // Content may be left out only by a turn that calls tools.
  std::ofstream(dir / "bad.json") << R"([{"role": "assistant"}])";
  EXPECT_THROW_MSG(read_chat_file(dir / "bad.json"), "bad.json: messages[0].content: missing (only a message with tool_calls");
  std::ofstream(dir / "bad_tools.json") << R"({"messages": [{"role": "user", "content": "a"}], "tools": {"name": "w"}})";
  EXPECT_THROW_MSG(read_chat_file(dir / "bad_tools.json"), "bad_tools.json: tools: expected a list of tool schemas");
}

}  // namespace
}  // namespace mm
