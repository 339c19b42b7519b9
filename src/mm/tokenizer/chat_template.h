// Chat messages in the OpenAI / Hugging Face layout and the Qwen2-VL / Qwen2.5-VL chat template
// (ChatML with vision placeholders), rendered exactly as transformers' apply_chat_template
// renders the official Jinja template.
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mm {

struct ContentPart {
  enum class Kind { text, image, video };
  Kind kind = Kind::text;
  std::string text;    // kind == text
  std::string source;  // kind == image / video: the path or URL of the image or video
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ... (rendered as given)
  std::vector<ContentPart> content;
  // How the content was given: a list of parts; a plain string (one text part: a model's own
  // Jinja template sees it as a string, as transformers passes it); null; or not at all (an
  // assistant turn that only calls tools). Templates tell these apart.
  enum class ContentForm { parts, string, null, absent };
  ContentForm content_form = ContentForm::parts;
  // The message's other fields (reasoning_content, tool_calls, tool_call_id, name, ...), handed to
  // a model's own template as given (keys in sorted order); the built-in template ignores them,
  // as Qwen2-VL's own does.
  nlohmann::ordered_json fields = nlohmann::ordered_json::object();
};

// Parses a JSON array of messages: {"role": ..., "content": "text" | [part, ...] | null, other
// fields...} (content may be left out, as in an assistant turn of tool calls only) where a part is
//   {"type": "text", "text": ...}
//   {"type": "image", "image" | "url" | "path": ...} or {"type": "image_url", "image_url": {"url": ...}}
//   {"type": "video", "video" | "url" | "path": ...}
// A part counts as an image or video by its type or by carrying an "image" / "image_url" /
// "video" key, in the template's order. Parts the template would silently drop (no text, unknown
// type) are errors. Errors name `where`, the message index and the field, e.g.
// "chat.json: messages[2].content[0].image_url.url: expected a string".
std::vector<ChatMessage> parse_messages(const nlohmann::ordered_json& messages, const std::string& where);
// The same from JSON whose objects lost their key order (a message's other fields come out sorted).
std::vector<ChatMessage> parse_messages(const nlohmann::json& messages, const std::string& where);

// A conversation file: the array of messages, or {"messages": [...], "tools": [...]} (tools: the
// schemas the template lists, as apply_chat_template's tools=; null when absent).
struct ChatFile {
  std::vector<ChatMessage> messages;
  nlohmann::ordered_json tools = nullptr;
};
ChatFile read_chat_file(const std::filesystem::path& path);

// A JSON file holding either the array of messages or {"messages": [...]}.
std::vector<ChatMessage> parse_messages_file(const std::filesystem::path& path);

// The Qwen2-VL / Qwen2.5-VL chat template: "<|im_start|>role\n...<|im_end|>\n" per message; a
// default system prompt "You are a helpful assistant." when the first message is not a system
// message; images as <|vision_start|><|image_pad|><|vision_end|>, videos as
// <|vision_start|><|video_pad|><|vision_end|>, prefixed by "Picture N: " / "Video N: " (counted
// over the whole conversation) when add_vision_id; "<|im_start|>assistant\n" at the end when
// add_generation_prompt. An empty conversation is an error, as in transformers.
std::string render_qwen2_vl_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                 bool add_vision_id = false);

}  // namespace mm
