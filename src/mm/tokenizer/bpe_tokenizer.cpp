#include "mm/tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/tokenizer/added_tokens.h"
#include "mm/tokenizer/bpe_model.h"
#include "mm/tokenizer/byte_level.h"
#include "mm/tokenizer/normalizer.h"
#include "mm/tokenizer/pre_tokenizer.h"
#include "mm/tokenizer/unicode_text.h"

namespace mm {

struct NamedToken {
  std::optional<std::string> token;
  std::optional<int64_t> id;
};

struct Tokenizer::Impl {
  Impl(BpeModel m, Normalizer n, PreTokenizer p)
      : model(std::move(m)), normalizer(std::move(n)), pre_tokenizer(std::move(p)) {}

  BpeModel model;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  bool byte_level_decoder = true;
  std::vector<AddedToken> added;
  // Built by finalize(), once `added` no longer changes.
  AddedTokenMatcher raw_matcher, normalized_matcher;
  StringMap<int64_t> added_ids;
  std::vector<std::string> tokens_by_id;
  std::vector<uint8_t> id_kind;  // kAbsent, kToken, kSpecial
  NamedToken bos, eos, pad, unk;
  std::vector<int64_t> template_prefix, template_suffix;  // the post-processor's special tokens

  static constexpr uint8_t kAbsent = 0, kToken = 1, kSpecial = 2;

  void finalize();
  std::vector<int64_t> encode(std::string_view text) const;
};

namespace {

std::string type_of(const nlohmann::json& spec) {
  return spec.is_object() && spec.contains("type") && spec["type"].is_string() ? spec["type"].get<std::string>()
                                                                               : spec.dump();
}

bool flag_or(const nlohmann::json& object, const char* key, bool fallback, const std::string& where) {
  if (!object.contains(key) || object[key].is_null()) return fallback;
  MM_CHECK(object[key].is_boolean(), where, ".", key, ": expected true or false, got ", object[key].dump());
  return object[key].get<bool>();
}

AddedToken parse_added_token(const nlohmann::json& entry, const std::string& where) {
  MM_CHECK(entry.is_object() && entry.contains("content") && entry["content"].is_string(), where,
           ".content: expected a string");
  AddedToken token;
  token.content = entry["content"].get<std::string>();
  MM_CHECK(!token.content.empty(), where, ".content: must not be empty");
  token.special = flag_or(entry, "special", false, where);
  token.single_word = flag_or(entry, "single_word", false, where);
  token.lstrip = flag_or(entry, "lstrip", false, where);
  token.rstrip = flag_or(entry, "rstrip", false, where);
  token.normalized = flag_or(entry, "normalized", !token.special, where);
  return token;
}

// The post-processor's single-sequence template as ids around the encoded text: TemplateProcessing
// ("single": [SpecialToken..., Sequence A, SpecialToken...]), possibly inside a Sequence;
// ByteLevel only adjusts offsets. transformers 5 writes a TemplateProcessing of just [A].
void parse_post_processor(const nlohmann::json& spec, const std::string& where,
                          std::vector<int64_t>& prefix, std::vector<int64_t>& suffix) {
  if (spec.is_null()) return;
  const std::string type = type_of(spec);
  if (type == "ByteLevel") return;
  if (type == "Sequence" && spec.contains("processors") && spec["processors"].is_array()) {
    for (size_t i = 0; i < spec["processors"].size(); ++i)
      parse_post_processor(spec["processors"][i], str_cat(where, ".processors[", i, "]"), prefix, suffix);
    return;
  }
  MM_CHECK(type == "TemplateProcessing", where, ".type: unsupported post-processor \"", type,
           "\" (supported: null, ByteLevel, TemplateProcessing, Sequence of them)");
  MM_CHECK(spec.contains("single") && spec["single"].is_array(), where, ".single: expected an array");
  bool seen_sequence = false;
  for (size_t i = 0; i < spec["single"].size(); ++i) {
    const auto& piece = spec["single"][i];
    const std::string at = str_cat(where, ".single[", i, "]");
    if (piece.contains("Sequence")) {
      MM_CHECK(!seen_sequence, at, ": a single-sequence template holds one Sequence");
      seen_sequence = true;
      continue;
    }
    MM_CHECK(piece.contains("SpecialToken") && piece["SpecialToken"].contains("id") &&
                 piece["SpecialToken"]["id"].is_string(),
             at, ": expected {\"Sequence\": ...} or {\"SpecialToken\": {\"id\": ...}}");
    const std::string name = piece["SpecialToken"]["id"].get<std::string>();
    const auto& table = spec.value("special_tokens", nlohmann::json::object());
    MM_CHECK(table.contains(name) && table[name].contains("ids") && table[name]["ids"].is_array(), where,
             ".special_tokens: no ids for \"", name, "\"");
    auto& out = seen_sequence ? suffix : prefix;
    for (const auto& id : table[name]["ids"]) {
      MM_CHECK(id.is_number_integer(), where, ".special_tokens.", name, ".ids: expected integers");
      out.push_back(id.get<int64_t>());
    }
  }
  MM_CHECK(seen_sequence, where, ".single: the template has no Sequence");
}

}  // namespace

void Tokenizer::Impl::finalize() {
  int64_t max_id = -1;
  for (const auto& [token, id] : model.vocab()) max_id = std::max<int64_t>(max_id, id);
  for (const AddedToken& t : added) max_id = std::max(max_id, t.id);
  tokens_by_id.assign(max_id + 1, std::string());
  id_kind.assign(max_id + 1, kAbsent);
  for (const auto& [token, id] : model.vocab()) {
    tokens_by_id[id] = token;
    id_kind[id] = kToken;
  }
  StringMap<bool> special_contents;
  added_ids.clear();
  std::vector<std::string> raw_patterns, normalized_patterns;
  std::vector<const AddedToken*> raw_tokens, normalized_tokens;
  for (const AddedToken& t : added) {
    tokens_by_id[t.id] = t.content;
    id_kind[t.id] = kToken;
    added_ids.emplace(t.content, t.id);
    if (t.special) special_contents.emplace(t.content, true);
    if (t.normalized) {
      normalized_patterns.push_back(normalizer.apply(t.content));
      normalized_tokens.push_back(&t);
    } else {
      raw_patterns.push_back(t.content);
      raw_tokens.push_back(&t);
    }
  }
  // `tokenizers` decides "special" by content, so a vocabulary entry equal to a special added
  // token is skipped too.
  for (size_t id = 0; id < tokens_by_id.size(); ++id) {
    if (id_kind[id] != kAbsent && special_contents.count(tokens_by_id[id])) id_kind[id] = kSpecial;
  }
  raw_matcher = AddedTokenMatcher(raw_patterns, raw_tokens);
  normalized_matcher = AddedTokenMatcher(normalized_patterns, normalized_tokens);
}

std::vector<int64_t> Tokenizer::Impl::encode(std::string_view input) const {
  std::string repaired;
  std::string_view text = input;
  if (!unicode::is_valid_utf8(input)) {
    repaired = unicode::repair_utf8(input);
    text = repaired;
  }
  std::vector<int64_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<TextSegment> raw_segments, segments;
  std::vector<std::string> words;
  raw_matcher.split(text, raw_segments);
  for (const TextSegment& raw : raw_segments) {
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      continue;
    }
    const std::string normalized = normalizer.apply(text.substr(raw.begin, raw.end - raw.begin));
    segments.clear();
    normalized_matcher.split(normalized, segments);
    for (const TextSegment& segment : segments) {
      if (segment.id >= 0) {
        ids.push_back(segment.id);
        continue;
      }
      words.clear();
      pre_tokenizer.split(std::string_view(normalized).substr(segment.begin, segment.end - segment.begin), words);
      for (const std::string& word : words) model.encode_word(word, ids);
    }
  }
  return ids;
}

namespace {

std::shared_ptr<Tokenizer::Impl> load_tokenizer_json(const std::filesystem::path& tokenizer_json) {
  const std::string file = tokenizer_json.string();
  const nlohmann::json spec = read_json_file(tokenizer_json);
  MM_CHECK(spec.is_object(), file, ": expected a JSON object");
  MM_CHECK(spec.contains("model"), file, ": model: missing");
  const std::string model_type = type_of(spec["model"]);
  MM_CHECK(spec["model"].is_object() && spec["model"].contains("type"), file,
           ": model.type: missing (expected \"BPE\")");
  MM_CHECK(model_type == "BPE", file, ": model.type: unsupported model \"", model_type,
           "\" (supported: BPE)");

  auto impl = std::make_shared<Tokenizer::Impl>(
      BpeModel::from_json(spec["model"], file),
      Normalizer::from_json(spec.value("normalizer", nlohmann::json()), file + ": normalizer"),
      PreTokenizer::from_json(spec.value("pre_tokenizer", nlohmann::json()), file + ": pre_tokenizer"));
  parse_post_processor(spec.value("post_processor", nlohmann::json()), file + ": post_processor",
                       impl->template_prefix, impl->template_suffix);

  const nlohmann::json decoder = spec.value("decoder", nlohmann::json());
  MM_CHECK(!decoder.is_null() && type_of(decoder) == "ByteLevel", file,
           ": decoder: unsupported decoder ", decoder.is_null() ? std::string("null") : "\"" + type_of(decoder) + "\"",
           " (supported: ByteLevel)");

  if (spec.contains("added_tokens") && !spec["added_tokens"].is_null()) {
    const auto& list = spec["added_tokens"];
    MM_CHECK(list.is_array(), file, ": added_tokens: expected an array");
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string where = str_cat(file, ": added_tokens[", i, "]");
      AddedToken token = parse_added_token(list[i], where);
      MM_CHECK(list[i].contains("id") && list[i]["id"].is_number_integer() && list[i]["id"].get<int64_t>() >= 0,
               where, ".id: expected a non-negative integer");
      token.id = list[i]["id"].get<int64_t>();
      impl->added.push_back(std::move(token));
    }
  }
  impl->finalize();
  return impl;
}

// A special token in tokenizer_config.json: a string, null, or {"content": ...} (AddedToken).
std::optional<std::string> config_token(const nlohmann::json& config, const char* key, const std::string& file) {
  if (!config.contains(key) || config[key].is_null()) return std::nullopt;
  const auto& value = config[key];
  if (value.is_string()) return value.get<std::string>();
  MM_CHECK(value.is_object() && value.contains("content") && value["content"].is_string(), file, ": ", key,
           ": expected a string, null or {\"content\": ...}, got ", value.dump());
  return value["content"].get<std::string>();
}

}  // namespace

Tokenizer Tokenizer::from_file(const std::filesystem::path& tokenizer_json) {
  return Tokenizer(load_tokenizer_json(tokenizer_json));
}

Tokenizer Tokenizer::from_dir(const std::filesystem::path& dir) {
  const auto json_path = dir / "tokenizer.json";
  MM_CHECK(std::filesystem::exists(json_path), dir.string(), ": no tokenizer.json in this directory");
  std::shared_ptr<Impl> impl = load_tokenizer_json(json_path);
  const auto config_path = dir / "tokenizer_config.json";
  if (!std::filesystem::exists(config_path)) return Tokenizer(std::move(impl));

  const std::string file = config_path.string();
  const nlohmann::json config = read_json_file(config_path);
  MM_CHECK(config.is_object(), file, ": expected a JSON object");

  if (config.contains("added_tokens_decoder") && !config["added_tokens_decoder"].is_null()) {
    const auto& decoder = config["added_tokens_decoder"];
    MM_CHECK(decoder.is_object(), file, ": added_tokens_decoder: expected an object of id -> token");
    for (const auto& [key, entry] : decoder.items()) {
      const std::string where = str_cat(file, ": added_tokens_decoder[\"", key, "\"]");
      int64_t id = -1;
      try {
        size_t used = 0;
        id = std::stoll(key, &used);
        if (used != key.size()) id = -1;
      } catch (const std::exception&) {
      }
      MM_CHECK(id >= 0, where, ": the key must be a non-negative integer id");
      AddedToken token = parse_added_token(entry, where);
      token.id = id;
      if (auto known = impl->added_ids.find(token.content); known != impl->added_ids.end()) {
        MM_CHECK(known->second == id, where, ": \"", token.content, "\" has id ", known->second,
                 " in tokenizer.json");
        continue;
      }
      const bool taken = id < static_cast<int64_t>(impl->id_kind.size()) && impl->id_kind[id] != Impl::kAbsent;
      if (taken) {
        const std::string& other = impl->tokens_by_id[id];
        MM_CHECK(other == token.content, where, ": id ", id, " is \"", other, "\" in tokenizer.json, not \"",
                 token.content, "\"");
      }
      // A vocabulary token listed here becomes an added token, as transformers does.
      impl->added.push_back(std::move(token));
    }
  }
  impl->finalize();

  auto named = [&](const char* key, NamedToken& out) {
    out.token = config_token(config, key, file);
    if (!out.token) return;
    auto id = Tokenizer(impl).token_to_id(*out.token);
    MM_CHECK(id, file, ": ", key, ": \"", *out.token, "\" is not in the vocabulary of tokenizer.json");
    out.id = id;
  };
  named("bos_token", impl->bos);
  named("eos_token", impl->eos);
  named("pad_token", impl->pad);
  named("unk_token", impl->unk);
  return Tokenizer(std::move(impl));
}

std::vector<int64_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (!add_special_tokens || (impl_->template_prefix.empty() && impl_->template_suffix.empty()))
    return impl_->encode(text);
  std::vector<int64_t> ids = impl_->template_prefix;
  const std::vector<int64_t> body = impl_->encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  ids.insert(ids.end(), impl_->template_suffix.begin(), impl_->template_suffix.end());
  return ids;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string_view> tokens;
  tokens.reserve(ids.size());
  const auto size = static_cast<int64_t>(impl_->id_kind.size());
  for (int64_t id : ids) {
    if (id < 0 || id >= size) continue;
    const uint8_t kind = impl_->id_kind[id];
    if (kind == Impl::kAbsent || (skip_special_tokens && kind == Impl::kSpecial)) continue;
    tokens.push_back(impl_->tokens_by_id[id]);
  }
  return byte_level::decode(tokens);
}

std::optional<int64_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto it = impl_->added_ids.find(token); it != impl_->added_ids.end()) return it->second;
  return impl_->model.token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int64_t id) const {
  if (id < 0 || id >= static_cast<int64_t>(impl_->id_kind.size()) || impl_->id_kind[id] == Impl::kAbsent) {
    return std::nullopt;
  }
  return impl_->tokens_by_id[id];
}

bool Tokenizer::is_special(int64_t id) const {
  return id >= 0 && id < static_cast<int64_t>(impl_->id_kind.size()) && impl_->id_kind[id] == Impl::kSpecial;
}

int64_t Tokenizer::vocab_size() const { return static_cast<int64_t>(impl_->id_kind.size()); }

const std::optional<std::string>& Tokenizer::bos_token() const { return impl_->bos.token; }
const std::optional<std::string>& Tokenizer::eos_token() const { return impl_->eos.token; }
const std::optional<std::string>& Tokenizer::pad_token() const { return impl_->pad.token; }
const std::optional<std::string>& Tokenizer::unk_token() const { return impl_->unk.token; }
std::optional<int64_t> Tokenizer::bos_token_id() const { return impl_->bos.id; }
std::optional<int64_t> Tokenizer::eos_token_id() const { return impl_->eos.id; }
std::optional<int64_t> Tokenizer::pad_token_id() const { return impl_->pad.id; }
std::optional<int64_t> Tokenizer::unk_token_id() const { return impl_->unk.id; }

}  // namespace mm
