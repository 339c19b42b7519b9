#include "mm/data/conversation.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "mm/core/error.h"
#include "mm/data/sample_errors.h"

namespace mm {
namespace {

using ojson = nlohmann::ordered_json;

[[noreturn]] void malformed(const std::string& where, const std::string& what) {
  throw SampleError(SkipReason::malformed_record, str_cat(where, ": ", what));
}

std::string map_role(const std::string& role, const std::string& where) {
  if (role == "human" || role == "user") return "user";
  if (role == "gpt" || role == "assistant" || role == "function_call") return "assistant";
  if (role == "system") return "system";
  if (role == "tool" || role == "observation") return "tool";
  malformed(where, str_cat("unknown role '", role,
                           "' (expected human/user, gpt/assistant, system, tool/observation or function_call)"));
}

// LLaMA-Factory's function_call value, {"name", "arguments"} or a list of them (JSON text or
// JSON), as the tool_calls chat templates read: [{"type": "function", "function": {...}}].
ojson tool_calls_of(const ojson& value, const std::string& where) {
  ojson calls = value;
  if (value.is_string()) {
    try {
      calls = ojson::parse(value.get<std::string>());
    } catch (const ojson::exception&) {
      malformed(where, "function_call: the value is not JSON like {\"name\": ..., \"arguments\": {...}}");
    }
  }
  if (calls.is_object()) calls = ojson::array({calls});
  if (!calls.is_array() || calls.empty())
    malformed(where, "function_call: expected {\"name\", \"arguments\"} or a non-empty list of them");
  ojson out = ojson::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const auto& call = calls[i];
    if (!call.is_object() || !call.contains("name") || !call["name"].is_string())
      malformed(where, str_cat("function_call[", i, "]: expected {\"name\": \"...\", \"arguments\": ...}"));
    ojson function = ojson::object();
    function["name"] = call["name"];
    function["arguments"] = call.contains("arguments") ? call["arguments"] : ojson::object();
    ojson entry = ojson::object();
    entry["type"] = "function";
    entry["function"] = std::move(function);
    out.push_back(std::move(entry));
  }
  return out;
}

// One turn in the form chat templates read: {"role", other fields..., "content"}; role names
// mapped, "from"/"value" read as "role"/"content", a function_call turn made an assistant turn
// with empty text and its tool_calls. Content stays as given (a missing one is left out).
ojson normalized_turn(const ojson& m, const std::string& at) {
  if (!m.is_object()) malformed(at, "expected an object");
  const ojson* role = m.contains("role") ? &m["role"] : m.contains("from") ? &m["from"] : nullptr;
  if (!role || !role->is_string()) malformed(at, "\"role\" / \"from\": expected a string");
  const ojson* content = m.contains("content") ? &m["content"] : m.contains("value") ? &m["value"] : nullptr;
  ojson out = ojson::object();
  out["role"] = map_role(role->get<std::string>(), at);
  for (const auto& [key, value] : m.items())
    if (key != "role" && key != "from" && key != "content" && key != "value") out[key] = value;
  if (role->get<std::string>() == "function_call") {
    if (!content) malformed(at, "function_call: missing \"value\" / \"content\" (the call)");
    out["tool_calls"] = tool_calls_of(*content, at);
    out["content"] = "";
  } else if (content) {
    out["content"] = *content;
  }
  const bool no_content = !out.contains("content") || out["content"].is_null();
  if (no_content && !out.contains("tool_calls"))
    malformed(at, "\"content\" / \"value\": missing (only a turn with tool_calls may leave it out)");
  return out;
}

// A record's "tools": a list of tool schemas, or a JSON string of one (LLaMA-Factory); null if
// absent.
ojson record_tools(const ojson& record, const std::string& where) {
  if (!record.contains("tools") || record["tools"].is_null()) return nullptr;
  ojson tools = record["tools"];
  if (tools.is_string()) {
    const std::string text = tools.get<std::string>();
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) return nullptr;  // LLaMA-Factory's "" = none
    try {
      tools = ojson::parse(text);
    } catch (const ojson::exception&) {
      malformed(where, "tools: the string is not JSON (expected a list of tool schemas)");
    }
  }
  if (!tools.is_array()) malformed(where, "tools: expected a list of tool schemas (or a JSON string of one)");
  for (size_t i = 0; i < tools.size(); ++i)
    if (!tools[i].is_object()) malformed(where, str_cat("tools[", i, "]: expected an object (a tool schema)"));
  return tools;
}

std::string resolve(const std::string& source, const std::filesystem::path& media_root) {
  const std::filesystem::path p(source);
  if (p.is_absolute() || media_root.empty()) return source;
  return (media_root / p).string();
}

// A media field that is a path or a list of paths; absent or null means none.
std::vector<std::string> media_list(const ojson& record, const char* plural, const char* singular,
                                    const std::string& where) {
  const char* key = record.contains(plural) ? plural : singular;
  if (!record.contains(key) || record[key].is_null()) return {};
  const auto& v = record[key];
  std::vector<std::string> out;
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string()) malformed(where, str_cat(key, "[", i, "]: expected a path string"));
      out.push_back(v[i].get<std::string>());
    }
  } else {
    malformed(where, str_cat(key, ": expected a path or a list of paths"));
  }
  return out;
}

// Text with "<image>" / "<video>" tags -> parts, in order; empty text between tags is dropped.
std::vector<ContentPart> split_tags(const std::string& text, size_t& images_used, size_t& videos_used,
                                    const std::vector<std::string>& images, const std::vector<std::string>& videos) {
  static const std::string kImage = "<image>", kVideo = "<video>";
  std::vector<ContentPart> parts;
  size_t pos = 0;
  auto push_text = [&](size_t end) {
    if (end > pos) parts.push_back({ContentPart::Kind::text, text.substr(pos, end - pos), ""});
  };
  while (pos < text.size()) {
    const size_t i = text.find(kImage, pos), v = text.find(kVideo, pos);
    const size_t next = std::min(i, v);
    if (next == std::string::npos) break;
    push_text(next);
    const bool is_image = next == i;
    ContentPart part;
    part.kind = is_image ? ContentPart::Kind::image : ContentPart::Kind::video;
    // Past the end of the media list: kept empty and reported as a mismatch by the caller.
    size_t& used = is_image ? images_used : videos_used;
    const auto& list = is_image ? images : videos;
    if (used < list.size()) part.source = list[used];
    ++used;
    parts.push_back(std::move(part));
    pos = next + (is_image ? kImage : kVideo).size();
  }
  push_text(text.size());
  return parts;
}

size_t count_tags(const std::string& text, const std::string& tag) {
  size_t n = 0;
  for (size_t p = text.find(tag); p != std::string::npos; p = text.find(tag, p + tag.size())) ++n;
  return n;
}

Conversation parse_text_form(const ojson& record, const ojson& turns,
                             const std::filesystem::path& media_root, const std::string& where) {
  std::vector<std::string> images = media_list(record, "images", "image", where);
  std::vector<std::string> videos = media_list(record, "videos", "video", where);
  for (auto& p : images) p = resolve(p, media_root);
  for (auto& p : videos) p = resolve(p, media_root);

  Conversation conv;
  if (record.contains("system") && !record["system"].is_null()) {
    if (!record["system"].is_string()) malformed(where, "system: expected a string");
    conv.messages.push_back({"system", {{ContentPart::Kind::text, record["system"].get<std::string>(), ""}}});
  }
  size_t image_tags = 0, video_tags = 0;
  std::vector<std::string> texts;
  for (size_t k = 0; k < turns.size(); ++k) {
    const std::string at = str_cat(where, ": turn ", k);
    ojson turn = normalized_turn(turns[k], at);
    ChatMessage msg;
    msg.role = turn["role"].get<std::string>();
    if (!turn.contains("content")) {
      msg.content_form = ChatMessage::ContentForm::absent;
    } else if (turn["content"].is_null()) {
      msg.content_form = ChatMessage::ContentForm::null;
    } else if (!turn["content"].is_string()) {
      malformed(at, "\"content\" / \"value\": expected a string");
    } else if (turn["content"].get<std::string>().empty()) {
      // "" stays a string (a tool-calling turn's empty text): templates test `content is string`.
      msg.content_form = ChatMessage::ContentForm::string;
      msg.content.push_back({ContentPart::Kind::text, "", ""});
    }
    texts.push_back(turn.contains("content") && turn["content"].is_string() ? turn["content"].get<std::string>() : "");
    image_tags += count_tags(texts.back(), "<image>");
    video_tags += count_tags(texts.back(), "<video>");
    for (const auto& [key, value] : turn.items())
      if (key != "role" && key != "content") msg.fields[key] = value;
    conv.messages.push_back(std::move(msg));
  }
  // A kind with no tags at all goes to the start of the first user turn, as LLaVA places it.
  const bool lead_images = image_tags == 0, lead_videos = video_tags == 0;
  if (!lead_images && image_tags != images.size())
    throw SampleError(SkipReason::placeholder_mismatch,
                      str_cat(where, ": ", image_tags, " <image> tags but ", images.size(), " images"));
  if (!lead_videos && video_tags != videos.size())
    throw SampleError(SkipReason::placeholder_mismatch,
                      str_cat(where, ": ", video_tags, " <video> tags but ", videos.size(), " videos"));

  const size_t first_turn = conv.messages.size() - texts.size();
  size_t images_used = 0, videos_used = 0;
  bool leading_placed = false;
  for (size_t k = 0; k < texts.size(); ++k) {
    ChatMessage& msg = conv.messages[first_turn + k];
    if (!leading_placed && msg.role == "user") {
      if (lead_images)
        for (const auto& p : images) msg.content.push_back({ContentPart::Kind::image, "", p});
      if (lead_videos)
        for (const auto& p : videos) msg.content.push_back({ContentPart::Kind::video, "", p});
      leading_placed = true;
    }
    for (auto& part : split_tags(texts[k], images_used, videos_used, images, videos))
      msg.content.push_back(std::move(part));
  }
  if (!leading_placed && ((lead_images && !images.empty()) || (lead_videos && !videos.empty())))
    throw SampleError(SkipReason::placeholder_mismatch,
                      str_cat(where, ": media given but no user turn to place them in"));
  return conv;
}

Conversation parse_parts_form(const ojson& turns, const std::filesystem::path& media_root,
                              const std::string& where) {
  ojson messages = ojson::array();
  for (size_t k = 0; k < turns.size(); ++k) messages.push_back(normalized_turn(turns[k], str_cat(where, ": turn ", k)));
  Conversation conv;
  try {
    conv.messages = parse_messages(messages, where);
  } catch (const SampleError&) {
    throw;
  } catch (const Error& e) {
    throw SampleError(SkipReason::malformed_record, e.what());
  }
  for (auto& msg : conv.messages)
    for (auto& part : msg.content)
      if (part.kind != ContentPart::Kind::text) part.source = resolve(part.source, media_root);
  return conv;
}

}  // namespace

Conversation parse_conversation(const ojson& record, const std::filesystem::path& media_root,
                                const std::string& where) {
  if (!record.is_object()) malformed(where, "expected a JSON object per record");
  const char* key = record.contains("messages") ? "messages" : "conversations";
  if (!record.contains(key)) malformed(where, "missing \"messages\" / \"conversations\"");
  const auto& turns = record[key];
  if (!turns.is_array() || turns.empty()) malformed(where, str_cat(key, ": expected a non-empty array"));

  bool has_parts = false;
  for (const auto& m : turns)
    if (m.is_object() && m.contains("content") && m["content"].is_array()) has_parts = true;
  Conversation conv = has_parts ? parse_parts_form(turns, media_root, where)
                                : parse_text_form(record, turns, media_root, where);
  conv.tools = record_tools(record, where);
  if (record.contains("type") && !record["type"].is_null()) {
    if (!record["type"].is_string()) malformed(where, "type: expected a string");
    conv.type = record["type"].get<std::string>();
  }
  return conv;
}

ConversationFile ConversationFile::open(const std::filesystem::path& path, std::filesystem::path media_root) {
  ConversationFile file;
  file.path_ = path;
  file.media_root_ = media_root.empty() ? path.parent_path() : std::move(media_root);
  std::ifstream in(path, std::ios::binary);
  MM_CHECK(in.good(), path.string(), ": cannot open the dataset file");
  file.jsonl_ = path.extension() != ".json";
  if (file.jsonl_) {
    std::string line;
    int64_t offset = 0, number = 0;
    while (std::getline(in, line)) {
      ++number;
      if (line.find_first_not_of(" \t\r") != std::string::npos) {
        file.offsets_.push_back(offset);
        file.lines_.push_back(number);
      }
      offset += static_cast<int64_t>(line.size()) + 1;
    }
  } else {
    ojson j;
    try {
      j = ojson::parse(in);
    } catch (const ojson::exception& e) {
      fail(path.string(), ": not valid JSON: ", e.what());
    }
    MM_CHECK(j.is_array(), path.string(), ": a .json dataset must be an array of records");
    file.records_ = std::make_shared<const ojson>(std::move(j));
  }
  return file;
}

size_t ConversationFile::size() const { return jsonl_ ? offsets_.size() : records_->size(); }

std::string ConversationFile::where(size_t i) const {
  const std::string name = path_.filename().string();
  return jsonl_ ? str_cat(name, ":", lines_.at(i)) : str_cat(name, "[", i, "]");
}

Conversation ConversationFile::get(size_t i) const {
  MM_CHECK(i < size(), path_.string(), ": record ", i, " out of range (", size(), " records)");
  const std::string at = where(i);
  Conversation conv;
  if (jsonl_) {
    std::ifstream in(path_, std::ios::binary);
    if (!in.good()) malformed(at, "cannot reopen the dataset file");
    in.seekg(offsets_[i]);
    std::string line;
    std::getline(in, line);
    ojson record;
    try {
      record = ojson::parse(line);
    } catch (const ojson::exception& e) {
      malformed(at, str_cat("not valid JSON: ", e.what()));
    }
    conv = parse_conversation(record, media_root_, at);
  } else {
    conv = parse_conversation((*records_)[i], media_root_, at);
  }
  conv.index = static_cast<int64_t>(i);
  return conv;
}

}  // namespace mm
