#include "mm/tokenizer/chat_template.h"

#include <nlohmann/json.hpp>

#include "mm/core/error.h"
#include "mm/core/json_config.h"

namespace mm {
namespace {

std::string string_field(const nlohmann::ordered_json& object, const char* key, const std::string& where) {
  const auto& value = object[key];
  MM_CHECK(value.is_string(), where, ".", key, ": expected a string, got ", value.dump());
  return value.get<std::string>();
}

// The media source of an image or video part: the first of `keys` present; "image_url" may be a
// string or {"url": ...} as in the OpenAI API.
std::string media_source(const nlohmann::ordered_json& part, std::initializer_list<const char*> keys,
                         const std::string& where, const char* kind) {
  for (const char* key : keys) {
    if (!part.contains(key)) continue;
    const auto& value = part[key];
    if (value.is_object()) {
      MM_CHECK(value.contains("url"), where, ".", key, ".url: missing");
      return string_field(value, "url", where + "." + key);
    }
    return string_field(part, key, where);
  }
  std::string names;
  for (const char* key : keys) names += std::string(names.empty() ? "" : ", ") + "\"" + key + "\"";
  fail(where, ": ", kind, " part without a source (expected one of ", names, ")");
}

ContentPart parse_part(const nlohmann::ordered_json& part, const std::string& where) {
  MM_CHECK(part.is_object(), where, ": expected an object like {\"type\": \"text\", \"text\": ...}, got ",
           part.dump());
  std::string type;
  if (part.contains("type")) type = string_field(part, "type", where);
  ContentPart out;
  // Same order of tests as the Jinja template.
  if (type == "image" || part.contains("image") || part.contains("image_url")) {
    out.kind = ContentPart::Kind::image;
    out.source = media_source(part, {"image", "image_url", "url", "path"}, where, "image");
  } else if (type == "video" || part.contains("video")) {
    out.kind = ContentPart::Kind::video;
    out.source = media_source(part, {"video", "url", "path"}, where, "video");
  } else if (part.contains("text")) {
    out.kind = ContentPart::Kind::text;
    out.text = string_field(part, "text", where);
  } else {
    fail(where, ": unsupported content part", type.empty() ? std::string() : " of type \"" + type + "\"",
         " (expected text, image, image_url or video)");
  }
  return out;
}

}  // namespace

std::vector<ChatMessage> parse_messages(const nlohmann::ordered_json& messages, const std::string& where) {
  MM_CHECK(messages.is_array(), where, ": messages: expected an array of {\"role\", \"content\"}");
  std::vector<ChatMessage> out;
  out.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string at = str_cat(where, ": messages[", i, "]");
    const auto& message = messages[i];
    MM_CHECK(message.is_object(), at, ": expected an object with \"role\" and \"content\"");
    MM_CHECK(message.contains("role"), at, ".role: missing");
    ChatMessage parsed;
    parsed.role = string_field(message, "role", at);
    MM_CHECK(!parsed.role.empty(), at, ".role: must not be empty");
    for (const auto& [key, value] : message.items())
      if (key != "role" && key != "content") parsed.fields[key] = value;
    // A turn without content is a mistake, except an assistant's that only calls tools.
    const bool no_content = !message.contains("content") || message["content"].is_null();
    MM_CHECK(!no_content || message.contains("tool_calls"), at,
             ".content: missing (only a message with tool_calls may leave it out)");
    if (!message.contains("content")) {
      parsed.content_form = ChatMessage::ContentForm::absent;
    } else if (const auto& content = message["content"]; content.is_null()) {
      parsed.content_form = ChatMessage::ContentForm::null;
    } else if (content.is_string()) {
      parsed.content.push_back({ContentPart::Kind::text, content.get<std::string>(), {}});
      parsed.content_form = ChatMessage::ContentForm::string;
    } else {
      MM_CHECK(content.is_array(), at, ".content: expected a string or an array of parts, got ", content.dump());
      for (size_t j = 0; j < content.size(); ++j) {
        parsed.content.push_back(parse_part(content[j], str_cat(at, ".content[", j, "]")));
      }
    }
    out.push_back(std::move(parsed));
  }
  return out;
}

std::vector<ChatMessage> parse_messages(const nlohmann::json& messages, const std::string& where) {
  return parse_messages(nlohmann::ordered_json::parse(messages.dump()), where);
}

ChatFile read_chat_file(const std::filesystem::path& path) {
  // In the file's key order: templates print tool schemas and call arguments with tojson, which
  // keeps it, as Python's dicts do.
  const auto json = read_ordered_json_file(path);
  ChatFile out;
  if (json.is_object() && json.contains("messages")) {
    out.messages = parse_messages(json["messages"], path.string());
    if (json.contains("tools") && !json["tools"].is_null()) {
      MM_CHECK(json["tools"].is_array(), path.string(), ": tools: expected a list of tool schemas");
      out.tools = json["tools"];
    }
  } else {
    out.messages = parse_messages(json, path.string());
  }
  return out;
}

std::vector<ChatMessage> parse_messages_file(const std::filesystem::path& path) { return read_chat_file(path).messages; }

std::string render_qwen2_vl_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                 bool add_vision_id) {
  // transformers refuses an empty conversation too.
  MM_CHECK(!messages.empty(), "chat template: no messages to render");
  std::string out;
  int images = 0, videos = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    if (i == 0 && message.role != "system") {
      out += "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n";
    }
    out += "<|im_start|>" + message.role + "\n";
    for (const ContentPart& part : message.content) {
      switch (part.kind) {
        case ContentPart::Kind::text:
          out += part.text;
          break;
        case ContentPart::Kind::image:
          ++images;
          if (add_vision_id) out += str_cat("Picture ", images, ": ");
          out += "<|vision_start|><|image_pad|><|vision_end|>";
          break;
        case ContentPart::Kind::video:
          ++videos;
          if (add_vision_id) out += str_cat("Video ", videos, ": ");
          out += "<|vision_start|><|video_pad|><|vision_end|>";
          break;
      }
    }
    out += "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace mm
