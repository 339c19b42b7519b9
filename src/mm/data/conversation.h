// Training conversations read from the record layouts people keep their data in, turned into the
// chat messages the chat template renders. Accepted records (one JSON object each):
//   LLaVA:      {"image": "a.jpg" | ["a.jpg", ...], "video": ...,
//                "conversations": [{"from": "human" | "gpt" | "system", "value": "<image>\n..."}]}
//   ShareGPT / LLaMA-Factory:
//               {"messages" | "conversations": [{"role" | "from": ..., "content" | "value": "..."}],
//                "images": [...], "videos": [...], "system": "..." (optional)}
//   OpenAI:     {"messages": [{"role": ..., "content": [{"type": "image", "image": ...}, ...]}]}
// In the text forms "<image>" / "<video>" tags mark, in order, where each media item goes; text
// without tags gets all media at the start of the first user turn (as LLaVA does). Roles:
// human/user -> user, gpt/assistant -> assistant, system -> system, tool/observation -> tool, and
// LLaMA-Factory's function_call -> an assistant turn whose tool_calls are its value ({"name",
// "arguments"} or a list of them, as JSON text or JSON). A message's other fields (tool_calls,
// tool_call_id, name, reasoning_content, ...) reach the model's chat template as given; content
// may be null or left out only by a turn with tool_calls. A record's "tools" (a list of tool
// schemas, or LLaMA-Factory's JSON string of one) are passed to the template with its messages.
// Records keep their key order (templates print tools and arguments with tojson). Relative media
// paths are resolved against media_root.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "mm/tokenizer/chat_template.h"

namespace mm {

struct Conversation {
  int64_t index = -1;  // position in its file
  std::vector<ChatMessage> messages;
  nlohmann::ordered_json tools;  // the record's tool schemas (a list), null for none
  std::string type;  // the record's optional "type" field, for per-type eval breakdowns
};

// Throws SampleError (malformed_record) naming `where` (e.g. "train.jsonl:17") and the field, or
// (placeholder_mismatch) when the tags do not match the media lists.
Conversation parse_conversation(const nlohmann::ordered_json& record, const std::filesystem::path& media_root,
                                const std::string& where);

// A .jsonl file (one record per line, blank lines ignored; line offsets indexed once at open) or
// a .json file holding an array of records. get() reads and parses one record on demand and is
// safe to call from several threads.
class ConversationFile {
 public:
  // media_root empty: the file's directory. A file that cannot be opened or a .json that is not
  // an array of records is an mm::Error here.
  static ConversationFile open(const std::filesystem::path& path, std::filesystem::path media_root = {});

  size_t size() const;
  // Throws SampleError (malformed_record / placeholder_mismatch) for a bad record, naming
  // file:line (jsonl) or file[i] (json).
  Conversation get(size_t i) const;
  // "train.jsonl:17" / "train.json[3]": how errors name record i.
  std::string where(size_t i) const;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::filesystem::path media_root_;
  bool jsonl_ = true;
  std::vector<int64_t> offsets_;  // jsonl: byte offset of each non-blank line
  std::vector<int64_t> lines_;    // jsonl: 1-based line number of each record
  std::shared_ptr<const nlohmann::ordered_json> records_;  // json: the parsed array
};

}  // namespace mm
