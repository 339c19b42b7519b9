// The chat template a model directory ships, found where transformers looks for it and rendered
// by our Jinja interpreter (jinja_template.h) with the variables apply_chat_template passes, so
// a fine-tuned model's own template (another system prompt, tools, thinking blocks) is the one
// used, never silently replaced. A directory without any template renders with the built-in
// Qwen2-VL template (chat_template.h), which is what transformers would refuse to do; the log
// says so where it matters.
#pragma once
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mm/tokenizer/chat_template.h"
#include "mm/tokenizer/jinja_template.h"

namespace mm {

class ModelChatTemplate {
 public:
  // The built-in Qwen2-VL template.
  ModelChatTemplate() = default;

  // From `dir`, in transformers' order: chat_template.jinja, else chat_template.json's
  // "chat_template", else tokenizer_config.json's "chat_template" (a string, or the entry named
  // "default" of a list of {name, template}); the special tokens of tokenizer_config.json
  // (bos_token, eos_token, pad_token, unk_token) are passed to it as transformers does. A
  // template that does not parse is an mm::Error naming its file, line and column.
  static ModelChatTemplate from_dir(const std::filesystem::path& dir);

  // The conversation rendered for the model; `add_generation_prompt` opens the assistant's turn.
  // `tools`: the tool schemas (a JSON list), null for none; defaults to set_tools'. An empty
  // conversation is an error, as in transformers.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& tools) const;

  // What apply_chat_template's keyword arguments give the template (enable_thinking,
  // reasoning_effort, ...), for every render: an object, from --chat-kwarg or the run config's
  // data.chat_template_kwargs. They override the special tokens, as in transformers; the names
  // transformers sets itself (messages, tools, documents, add_generation_prompt) are refused,
  // and so is any variable for the built-in template, which reads none.
  void set_kwargs(const nlohmann::ordered_json& kwargs);
  // The tool schemas every render passes unless it names its own: a JSON list, or null.
  void set_tools(const nlohmann::ordered_json& tools);

  // Where the template came from: "<dir>/chat_template.jinja", ..., or "built-in Qwen2-VL template".
  const std::string& source() const { return source_; }
  bool is_builtin() const { return !jinja_; }

 private:
  std::shared_ptr<const JinjaTemplate> jinja_;
  std::string source_ = "built-in Qwen2-VL template";
  nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();
  nlohmann::ordered_json kwargs_ = nlohmann::ordered_json::object();
  nlohmann::ordered_json tools_ = nullptr;
};

// KEY=VALUE settings as the command line gives them (--chat-kwarg enable_thinking=false): VALUE
// is read as JSON when it is JSON (true, 3, "x", [1]) and as a string otherwise. Errors name the
// option and the setting.
nlohmann::ordered_json parse_chat_kwargs(const std::vector<std::string>& settings, const std::string& option);
// One such VALUE: JSON when it is JSON, else the string itself.
nlohmann::ordered_json chat_kwarg_value(const std::string& text);

// A JSON file of tool schemas ([{"type": "function", "function": {...}}, ...]); errors name it.
nlohmann::ordered_json read_tools_file(const std::filesystem::path& path);

// The messages as apply_chat_template receives them: {"role", "content", other fields} with
// content a string, null or left out as given (ChatMessage::ContentForm), or a list of {"type": "text", "text"} / {"type": "image", "image"} /
// {"type": "video", "video"} parts.
nlohmann::ordered_json chat_messages_json(const std::vector<ChatMessage>& messages);

}  // namespace mm
