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
    using Form = ChatMessage::ContentForm;
    if (message.content_form == Form::absent) {
    } else if (message.content_form == Form::null) {
      m["content"] = nullptr;
    } else if (message.content_form == Form::string && message.content.size() == 1 &&
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
    for (const auto& [key, value] : message.fields.items()) m[key] = value;
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
  return render(messages, add_generation_prompt, tools_);
}

std::string ModelChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                      const nlohmann::ordered_json& tools) const {
  if (!jinja_) {
    MM_CHECK(tools.is_null(), "chat template: tools were given, but the model directory ships no chat template of ",
             "its own and the built-in Qwen2-VL template has no tool support");
    return render_qwen2_vl_chat(messages, add_generation_prompt);
  }
  MM_CHECK(!messages.empty(), "chat template: no messages to render");
  MM_CHECK(tools.is_null() || tools.is_array(), "chat template: tools: expected a list of tool schemas, got ",
           tools.dump());
  // transformers: render(messages=, tools=, documents=, add_generation_prompt=,
  //                      **{**special_tokens_map, **kwargs})
  nlohmann::ordered_json context = special_tokens_;
  for (const auto& [key, value] : kwargs_.items()) context[key] = value;
  context["messages"] = chat_messages_json(messages);
  context["tools"] = tools;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = add_generation_prompt;
  return jinja_->render(context);
}

void ModelChatTemplate::set_kwargs(const nlohmann::ordered_json& kwargs) {
  MM_CHECK(kwargs.is_object(), "chat template variables: expected an object of name: value, got ", kwargs.dump());
  for (const auto& [key, value] : kwargs.items()) {
    for (const char* reserved : {"messages", "tools", "documents", "add_generation_prompt"})
      MM_CHECK(key != reserved, "chat template variable '", key, "': set by mmtrain itself",
               key == "tools" ? " (give tools with --tools FILE or a \"tools\" list beside the messages)" : "");
    MM_CHECK(jinja_ || kwargs.empty(), "chat template variable '", key, "': the model directory ships no chat ",
             "template of its own, and the built-in Qwen2-VL template reads no variables");
  }
  kwargs_ = kwargs;
}

void ModelChatTemplate::set_tools(const nlohmann::ordered_json& tools) {
  MM_CHECK(tools.is_null() || tools.is_array(), "tools: expected a list of tool schemas, got ", tools.dump());
  MM_CHECK(jinja_ || tools.is_null(), "tools were given, but the model directory ships no chat template of its ",
           "own and the built-in Qwen2-VL template has no tool support");
  tools_ = tools;
}

nlohmann::ordered_json parse_chat_kwargs(const std::vector<std::string>& settings, const std::string& option) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto& setting : settings) {
    const auto eq = setting.find('=');
    MM_CHECK(eq != std::string::npos && eq > 0, option, " ", setting, ": expected NAME=VALUE (e.g. enable_thinking=false)");
    out[setting.substr(0, eq)] = chat_kwarg_value(setting.substr(eq + 1));
  }
  return out;
}

nlohmann::ordered_json chat_kwarg_value(const std::string& text) {
  auto value = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  return value.is_discarded() ? nlohmann::ordered_json(text) : value;
}

nlohmann::ordered_json read_tools_file(const std::filesystem::path& path) {
  const auto json = read_ordered_json_file(path);
  MM_CHECK(json.is_array(), path.string(), ": expected a JSON list of tool schemas ([{\"type\": \"function\", ...}])");
  for (size_t i = 0; i < json.size(); ++i)
    MM_CHECK(json[i].is_object(), path.string(), ": [", i, "]: expected an object (a tool schema)");
  return json;
}

}  // namespace mm
