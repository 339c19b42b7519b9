// Chat messages in the OpenAI / Hugging Face layout and the Qwen2-VL / Qwen2.5-VL chat template
// (ChatML with vision placeholders), rendered exactly as transformers' apply_chat_template
// renders the official Jinja template.
#pragma once
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
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
  // The content was given as a plain string (one text part): a model's own Jinja template sees
  // it as a string, as transformers passes it, not as a list of parts.
  bool content_is_string = false;
};

// Parses a JSON array of messages: {"role": ..., "content": "text" | [part, ...]} where a part is
//   {"type": "text", "text": ...}
//   {"type": "image", "image" | "url" | "path": ...} or {"type": "image_url", "image_url": {"url": ...}}
//   {"type": "video", "video" | "url" | "path": ...}
// A part counts as an image or video by its type or by carrying an "image" / "image_url" /
// "video" key, in the template's order. Parts the template would silently drop (no text, unknown
// type) are errors. Errors name `where`, the message index and the field, e.g.
// "chat.json: messages[2].content[0].image_url.url: expected a string".
std::vector<ChatMessage> parse_messages(const nlohmann::json& messages, const std::string& where);

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
