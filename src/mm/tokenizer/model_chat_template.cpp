#include "mm/tokenizer/model_chat_template.h"

#include <fstream>
#include <sstream>

#include "mm/core/error.h"
#include "mm/core/json_config.h"

namespace mm {
namespace {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  MM_CHECK(in, path.string(), ": cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// tokenizer_config.json's "chat_template": a string, or [{"name", "template"}, ...] of which
// transformers uses "default".
std::string config_template(const nlohmann::json& value, const std::string& where) {
  if (value.is_string()) return value.get<std::string>();
  MM_CHECK(value.is_array(), where, ": chat_template: expected a string or a list of {name, template}");
  for (const auto& entry : value)
    if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
        entry["template"].is_string())
      return entry["template"].get<std::string>();
  fail(where, ": chat_template: a list without an entry named \"default\" (mmtrain renders the default one)");
}

// A special token as tokenizer_config.json writes it: a string or an AddedToken {"content": ...}.
void add_special_token(nlohmann::ordered_json& out, const nlohmann::json& config, const char* key) {
  if (!config.contains(key)) return;
  const auto& value = config[key];
  if (value.is_string()) out[key] = value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string())
    out[key] = value["content"].get<std::string>();
}

}  // namespace

nlohmann::ordered_json chat_messages_json(const std::vector<ChatMessage>& messages) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& message : messages) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    m["role"] = message.role;
    if (message.content_is_string && message.content.size() == 1 &&
        message.content[0].kind == ContentPart::Kind::text) {
      m["content"] = message.content[0].text;
    } else {
      nlohmann::ordered_json parts = nlohmann::ordered_json::array();
      for (const auto& part : message.content) {
        nlohmann::ordered_json p = nlohmann::ordered_json::object();
        switch (part.kind) {
          case ContentPart::Kind::text:
            p["type"] = "text";
            p["text"] = part.text;
            break;
          case ContentPart::Kind::image:
            p["type"] = "image";
            p["image"] = part.source;
            break;
          case ContentPart::Kind::video:
            p["type"] = "video";
            p["video"] = part.source;
            break;
        }
        parts.push_back(std::move(p));
      }
      m["content"] = std::move(parts);
    }
    out.push_back(std::move(m));
  }
  return out;
}

ModelChatTemplate ModelChatTemplate::from_dir(const std::filesystem::path& dir) {
  ModelChatTemplate out;
  const auto tokenizer_config = dir / "tokenizer_config.json";
  nlohmann::json config = nlohmann::json::object();
  if (std::filesystem::is_regular_file(tokenizer_config)) {
    config = read_json_file(tokenizer_config);
    MM_CHECK(config.is_object(), tokenizer_config.string(), ": expected a JSON object");
    for (const char* key : {"bos_token", "eos_token", "pad_token", "unk_token"})
      add_special_token(out.special_tokens_, config, key);
  }
  std::string text, source;
  if (const auto jinja = dir / "chat_template.jinja"; std::filesystem::is_regular_file(jinja)) {
    text = read_text(jinja);
    source = jinja.string();
  } else if (const auto json = dir / "chat_template.json"; std::filesystem::is_regular_file(json)) {
    const auto value = read_json_file(json);
    MM_CHECK(value.is_object() && value.contains("chat_template") && value["chat_template"].is_string(),
             json.string(), ": expected {\"chat_template\": \"...\"}");
    text = value["chat_template"].get<std::string>();
    source = json.string();
  } else if (config.contains("chat_template") && !config["chat_template"].is_null()) {
    text = config_template(config["chat_template"], tokenizer_config.string());
    source = tokenizer_config.string() + " (chat_template)";
  } else {
    return out;
  }
  out.jinja_ = std::make_shared<const JinjaTemplate>(text, source);
  out.source_ = source;
  return out;
}

std::string ModelChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  if (!jinja_) return render_qwen2_vl_chat(messages, add_generation_prompt);
  MM_CHECK(!messages.empty(), "chat template: no messages to render");
  nlohmann::ordered_json context = special_tokens_;
  context["messages"] = chat_messages_json(messages);
  context["add_generation_prompt"] = add_generation_prompt;
  return jinja_->render(context);
}

}  // namespace mm
