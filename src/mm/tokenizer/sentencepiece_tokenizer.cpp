#include "mm/tokenizer/sentencepiece_tokenizer.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "mm/core/base64.h"
#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/tokenizer/added_tokens.h"
#include "mm/tokenizer/precompiled_normalizer.h"
#include "mm/tokenizer/sentencepiece_model.h"
#include "mm/tokenizer/unigram_model.h"
#include "mm/tokenizer/unicode_text.h"

namespace mm {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // ▁ U+2581
// transformers' T5Tokenizer builds its Unigram model with unk_id=2 whatever spiece.model says.
constexpr int64_t kT5UnkId = 2;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  MM_CHECK(in.good(), path.string(), ": cannot open the SentencePiece model");
  std::ostringstream data;
  data << in.rdbuf();
  return data.str();
}

// A special-token entry of tokenizer_config.json / special_tokens_map.json: a string or an
// AddedToken dict {"content": ...}.
std::optional<std::string> token_string(const nlohmann::json& config, const std::string& key) {
  if (!config.is_object() || !config.contains(key) || config[key].is_null()) return std::nullopt;
  const auto& value = config[key];
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    return value["content"].get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

struct SentencePieceTokenizer::Impl {
  UnigramModel model;
  PrecompiledNormalizer normalizer;
  std::vector<std::string> pieces;     // spm id -> piece
  std::vector<AddedToken> added;       // in id order
  std::unordered_map<std::string, int64_t> added_ids;
  std::unordered_map<int64_t, size_t> added_by_id;  // id -> index into `added`
  AddedTokenMatcher raw_matcher, normalized_matcher;
  int64_t size = 0;
  int64_t eos = -1, pad = -1, unk = -1;
  std::string file;

  void finish_added_tokens();
  int64_t resolve(const std::string& token, const char* role) const;
  void encode_text(std::string_view text, std::vector<int64_t>& ids) const;
  void encode_word(std::string_view word, std::vector<int64_t>& ids) const;
};

void SentencePieceTokenizer::Impl::finish_added_tokens() {
  std::sort(added.begin(), added.end(), [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
  std::vector<std::string> raw_patterns, normalized_patterns;
  std::vector<const AddedToken*> raw_tokens, normalized_tokens;
  size = static_cast<int64_t>(pieces.size());
  for (size_t i = 0; i < added.size(); ++i) {
    const AddedToken& token = added[i];
    MM_CHECK(token.id >= 0, file, ": added token '", token.content, "' has a negative id");
    MM_CHECK(!token.content.empty(), file, ": added token ", token.id, " is empty");
    added_ids.emplace(token.content, token.id);
    added_by_id[token.id] = i;
    size = std::max(size, token.id + 1);
    if (token.normalized) {
      normalized_patterns.push_back(normalizer.normalize(token.content));
      normalized_tokens.push_back(&token);
    } else {
      raw_patterns.push_back(token.content);
      raw_tokens.push_back(&token);
    }
  }
  raw_matcher = AddedTokenMatcher(raw_patterns, raw_tokens);
  normalized_matcher = AddedTokenMatcher(normalized_patterns, normalized_tokens);
}

int64_t SentencePieceTokenizer::Impl::resolve(const std::string& token, const char* role) const {
  if (const auto it = added_ids.find(token); it != added_ids.end()) return it->second;
  const int64_t id = model.piece_to_id(token);
  MM_CHECK(id >= 0, file, ": ", role, " '",
           token, "' is neither a piece of the model nor an added token");
  return id;
}

void SentencePieceTokenizer::Impl::encode_word(std::string_view word, std::vector<int64_t>& ids) const {
  model.encode(word, ids);
}

// `tokenizers`' Precompiled normalizer, WhitespaceSplit and Metaspace(prepend always, split),
// then the Unigram model on each ▁-led piece.
void SentencePieceTokenizer::Impl::encode_text(std::string_view raw, std::vector<int64_t>& ids) const {
  const std::string text = normalizer.normalize(raw);
  std::vector<TextSegment> segments;
  normalized_matcher.split(text, segments);
  std::string word;
  for (const TextSegment& segment : segments) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
      continue;
    }
    const std::string_view part = std::string_view(text).substr(segment.begin, segment.end - segment.begin);
    size_t pos = 0;
    while (pos < part.size()) {
      size_t next = pos;
      if (unicode::is_white_space(unicode::next_code_point(part, next))) {
        pos = next;
        continue;
      }
      size_t end = pos;
      while (end < part.size()) {
        size_t after = end;
        if (unicode::is_white_space(unicode::next_code_point(part, after))) break;
        end = after;
      }
      word.clear();
      const std::string_view w = part.substr(pos, end - pos);
      if (w.substr(0, kMetaspace.size()) != kMetaspace) word += kMetaspace;
      word += w;
      // Split before every ▁ but a leading one (Metaspace split=True, MergedWithNext).
      size_t start = 0;
      while (start < word.size()) {
        size_t cut = word.find(kMetaspace, start + kMetaspace.size());
        if (cut == std::string::npos) cut = word.size();
        encode_word(std::string_view(word).substr(start, cut - start), ids);
        start = cut;
      }
      pos = end;
    }
  }
}

namespace {

std::shared_ptr<SentencePieceTokenizer::Impl> load_model(const fs::path& spiece_model) {
  auto impl = std::make_shared<SentencePieceTokenizer::Impl>();
  impl->file = spiece_model.string();
  MM_CHECK(fs::is_regular_file(spiece_model), impl->file, ": SentencePiece model not found");
  const std::string serialized = read_file(spiece_model);
  SentencePieceModelInfo info = read_sentencepiece_model(serialized, impl->file);
  MM_CHECK(info.model_type == 1, impl->file, ": model_type ", info.model_type,
           " is not supported (T5/umT5 tokenizers are Unigram models, model_type 1)");
  constexpr int kTypeUnknown = 2;
  const auto unk = std::find(info.types.begin(), info.types.end(), kTypeUnknown);
  MM_CHECK(unk != info.types.end(), impl->file, ": not a valid SentencePiece model (no unknown piece)");
  const int64_t unk_id = unk - info.types.begin();
  MM_CHECK(unk_id == kT5UnkId, impl->file, ": the unknown piece has id ", unk_id,
           "; T5's tokenizer requires <unk> at id 2");
  impl->normalizer = PrecompiledNormalizer(info.precompiled_charsmap, impl->file);
  impl->pieces = info.pieces;
  impl->model = UnigramModel(std::move(info.pieces), info.scores, unk_id);
  return impl;
}

// The parts of a tokenizer.json `tokenizers` runs that this tokenizer implements: a Unigram model
// without byte fallback, the Precompiled normalizer (or none), WhitespaceSplit then Metaspace
// (replacement ▁, prepend_scheme always, split). Anything else is refused naming its field, since
// it would tokenize differently.
void check_json_pipeline(const nlohmann::json& spec, const std::string& file) {
  const auto& pre = spec.value("pre_tokenizer", nlohmann::json());
  const auto metaspace_ok = [](const nlohmann::json& m) {
    return m.is_object() && m.value("type", "") == "Metaspace" && m.value("replacement", "") == std::string(kMetaspace) &&
           m.value("prepend_scheme", "always") == "always" && m.value("split", true);
  };
  const bool pre_ok = metaspace_ok(pre) ||
                      (pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers") &&
                       pre["pretokenizers"].is_array() && pre["pretokenizers"].size() == 2 &&
                       pre["pretokenizers"][0].value("type", "") == "WhitespaceSplit" &&
                       metaspace_ok(pre["pretokenizers"][1]));
  MM_CHECK(pre_ok, file, ": pre_tokenizer ", pre.dump().substr(0, 200),
           " is not the T5/umT5 one (WhitespaceSplit, then Metaspace with replacement \u2581, prepend_scheme "
           "always, split true)");
}

// The Precompiled charsmap of a tokenizer.json normalizer (empty for none).
std::string json_charsmap(const nlohmann::json& spec, const std::string& file) {
  const auto& normalizer = spec.value("normalizer", nlohmann::json());
  if (normalizer.is_null()) return "";
  const nlohmann::json* precompiled = &normalizer;
  if (normalizer.is_object() && normalizer.value("type", "") == "Sequence" && normalizer.contains("normalizers") &&
      normalizer["normalizers"].is_array() && normalizer["normalizers"].size() == 1)
    precompiled = &normalizer["normalizers"][0];
  MM_CHECK(precompiled->is_object() && precompiled->value("type", "") == "Precompiled" &&
               (*precompiled)["precompiled_charsmap"].is_string(),
           file, ": normalizer ", normalizer.dump().substr(0, 200),
           " is not supported (the Precompiled normalizer of a SentencePiece model, or none)");
  return base64_decode((*precompiled)["precompiled_charsmap"].get<std::string>(), file + ": normalizer.precompiled_charsmap");
}

// The model of a tokenizer directory that has tokenizer.json but no spiece.model (what
// transformers' save_pretrained writes for a tokenizers-backed T5 tokenizer): the Unigram
// vocabulary, scores and unk_id from model, the charsmap from normalizer.
std::shared_ptr<SentencePieceTokenizer::Impl> load_json_model(const nlohmann::json& spec, const fs::path& tokenizer_json) {
  auto impl = std::make_shared<SentencePieceTokenizer::Impl>();
  impl->file = tokenizer_json.string();
  const std::string& file = impl->file;
  MM_CHECK(spec.is_object() && spec.contains("model") && spec["model"].is_object(), file, ": model: missing");
  const JsonView model(spec["model"], file, "model.");
  const auto type = model.get<std::string>("type");
  MM_CHECK(type == "Unigram", file, ": model.type: '", type, "' is not a SentencePiece Unigram model");
  MM_CHECK(!model.get_or<bool>("byte_fallback", false), file,
           ": model.byte_fallback: true is not supported (T5/umT5 tokenizers map unknown characters to <unk>)");
  const auto& vocab = spec["model"]["vocab"];
  MM_CHECK(vocab.is_array() && !vocab.empty(), file, ": model.vocab: expected a non-empty list of [piece, score]");
  std::vector<std::string> pieces;
  std::vector<double> scores;
  pieces.reserve(vocab.size());
  scores.reserve(vocab.size());
  for (size_t i = 0; i < vocab.size(); ++i) {
    const auto& entry = vocab[i];
    MM_CHECK(entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_number(), file,
             ": model.vocab[", i, "]: expected [piece, score], got ", entry.dump().substr(0, 80));
    pieces.push_back(entry[0].get<std::string>());
    scores.push_back(entry[1].get<double>());
  }
  MM_CHECK(spec["model"].contains("unk_id") && spec["model"]["unk_id"].is_number_integer(), file,
           ": model.unk_id: required (an integer)");
  const auto unk_id = spec["model"]["unk_id"].get<int64_t>();
  MM_CHECK(unk_id >= 0 && unk_id < static_cast<int64_t>(pieces.size()), file, ": model.unk_id ", unk_id,
           " is outside the vocabulary of ", pieces.size());
  check_json_pipeline(spec, file);
  impl->normalizer = PrecompiledNormalizer(json_charsmap(spec, file), file);
  impl->pieces = pieces;
  impl->model = UnigramModel(std::move(pieces), scores, unk_id);
  return impl;
}

AddedToken special(std::string content, int64_t id) {
  AddedToken token;
  token.content = std::move(content);
  token.id = id;
  token.special = true;
  return token;
}

// T5Tokenizer without tokenizer.json: pad/eos/unk and `extra_ids` sentinels, <extra_id_0> last.
void add_t5_defaults(SentencePieceTokenizer::Impl& impl, const nlohmann::json& config,
                     const nlohmann::json& special_map, const std::string& config_file) {
  std::vector<std::string> named;
  for (const char* key : {"pad_token", "eos_token", "unk_token"}) {
    auto token = token_string(config, key);
    if (!token) token = token_string(special_map, key);
    if (token) named.push_back(*token);
  }
  for (const std::string& t : {std::string("<pad>"), std::string("</s>"), std::string("<unk>")}) {
    if (std::find(named.begin(), named.end(), t) == named.end()) named.push_back(t);
  }
  for (const std::string& t : named) impl.added.push_back(special(t, impl.resolve(t, "special token")));
  const int64_t extra_ids = JsonView(config, config_file).get_or<int64_t>("extra_ids", 100);
  MM_CHECK(extra_ids >= 0, config_file, ": extra_ids: must be >= 0 (got ", extra_ids, ")");
  const auto base = static_cast<int64_t>(impl.pieces.size());
  for (int64_t i = 0; i < extra_ids; ++i) {
    impl.added.push_back(special("<extra_id_" + std::to_string(i) + ">", base + extra_ids - 1 - i));
  }
}

void read_added_tokens(SentencePieceTokenizer::Impl& impl, const nlohmann::json& spec, const fs::path& tokenizer_json) {
  const std::string file = tokenizer_json.string();
  MM_CHECK(spec.is_object(), file, ": expected a JSON object");
  const JsonView view(spec, file);
  if (spec.contains("model") && spec["model"].is_object() && spec["model"].contains("type")) {
    const auto type = spec["model"]["type"];
    MM_CHECK(type == "Unigram", file, ": model.type: ", type.dump(), " is not a SentencePiece Unigram model");
  }
  if (!view.has("added_tokens")) return;
  MM_CHECK(spec["added_tokens"].is_array(), file, ": added_tokens: expected a list");
  for (size_t i = 0; i < spec["added_tokens"].size(); ++i) {
    const JsonView entry(spec["added_tokens"][i], file, "added_tokens." + std::to_string(i) + ".");
    AddedToken token;
    token.id = entry.get<int64_t>("id");
    token.content = entry.get<std::string>("content");
    token.single_word = entry.get_or<bool>("single_word", false);
    token.lstrip = entry.get_or<bool>("lstrip", false);
    token.rstrip = entry.get_or<bool>("rstrip", false);
    token.normalized = entry.get_or<bool>("normalized", false);
    token.special = entry.get_or<bool>("special", false);
    impl.added.push_back(std::move(token));
  }
}

nlohmann::json read_optional_json(const fs::path& path) {
  return fs::exists(path) ? read_json_file(path) : nlohmann::json::object();
}

std::string named_token(const nlohmann::json& config, const nlohmann::json& special_map, const char* key,
                        const char* fallback) {
  if (auto token = token_string(config, key)) return *token;
  if (auto token = token_string(special_map, key)) return *token;
  return fallback;
}

SentencePieceTokenizer::Impl& finish(SentencePieceTokenizer::Impl& impl, const nlohmann::json& config,
                                     const nlohmann::json& special_map) {
  impl.finish_added_tokens();
  impl.eos = impl.resolve(named_token(config, special_map, "eos_token", "</s>"), "eos_token");
  impl.pad = impl.resolve(named_token(config, special_map, "pad_token", "<pad>"), "pad_token");
  impl.unk = impl.resolve(named_token(config, special_map, "unk_token", "<unk>"), "unk_token");
  return impl;
}

}  // namespace

SentencePieceTokenizer SentencePieceTokenizer::from_dir(const fs::path& dir) {
  MM_CHECK(fs::is_directory(dir), dir.string(), ": tokenizer directory not found");
  // spiece.model when present (the reference builds its model from it); else the model
  // tokenizer.json carries.
  // tokenizer.json is read once (umT5's is 16 MB) for both its model and its added tokens.
  const fs::path tokenizer_json = dir / "tokenizer.json";
  const bool has_json = fs::exists(tokenizer_json);
  const nlohmann::json spec = has_json ? read_json_file(tokenizer_json) : nlohmann::json();
  auto impl = fs::exists(dir / "spiece.model") || !has_json ? load_model(dir / "spiece.model")
                                                             : load_json_model(spec, tokenizer_json);
  const fs::path config_file = dir / "tokenizer_config.json";
  const nlohmann::json config = read_optional_json(config_file);
  const nlohmann::json special_map = read_optional_json(dir / "special_tokens_map.json");
  if (has_json) {
    read_added_tokens(*impl, spec, tokenizer_json);
  } else {
    add_t5_defaults(*impl, config, special_map, config_file.string());
  }
  finish(*impl, config, special_map);
  return SentencePieceTokenizer(std::move(impl));
}

SentencePieceTokenizer SentencePieceTokenizer::from_file(const fs::path& spiece_model) {
  auto impl = load_model(spiece_model);
  const auto empty = nlohmann::json::object();
  add_t5_defaults(*impl, empty, empty, spiece_model.string());
  finish(*impl, empty, empty);
  return SentencePieceTokenizer(std::move(impl));
}

std::vector<int64_t> SentencePieceTokenizer::encode(std::string_view input, bool add_special_tokens) const {
  std::string repaired;
  std::string_view text = input;
  if (!unicode::is_valid_utf8(input)) {
    repaired = unicode::repair_utf8(input);
    text = repaired;
  }
  std::vector<int64_t> ids;
  std::vector<TextSegment> segments;
  impl_->raw_matcher.split(text, segments);
  for (const TextSegment& segment : segments) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
    } else {
      impl_->encode_text(text.substr(segment.begin, segment.end - segment.begin), ids);
    }
  }
  if (add_special_tokens) ids.push_back(impl_->eos);
  return ids;
}

SentencePieceTokenizer::PaddedBatch SentencePieceTokenizer::encode_batch(const std::vector<std::string>& texts,
                                                                         int64_t max_length,
                                                                         bool add_special_tokens) const {
  const int64_t reserved = add_special_tokens ? 1 : 0;
  MM_CHECK(max_length > reserved, "encode_batch: max_length must be > ", reserved, " (got ", max_length, ")");
  PaddedBatch out;
  out.batch = static_cast<int64_t>(texts.size());
  out.length = max_length;
  out.input_ids.assign(out.batch * max_length, impl_->pad);
  out.attention_mask.assign(out.batch * max_length, 0);
  for (int64_t b = 0; b < out.batch; ++b) {
    std::vector<int64_t> ids = encode(texts[b], false);
    if (static_cast<int64_t>(ids.size()) > max_length - reserved) ids.resize(max_length - reserved);
    if (add_special_tokens) ids.push_back(impl_->eos);
    std::copy(ids.begin(), ids.end(), out.input_ids.begin() + b * max_length);
    std::fill_n(out.attention_mask.begin() + b * max_length, ids.size(), 1);
  }
  return out;
}

std::string SentencePieceTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::string out;
  bool first = true;
  for (const int64_t id : ids) {
    if (skip_special_tokens && is_special(id)) continue;
    const auto token = id_to_token(id);
    if (!token) continue;
    // Metaspace decoder: ▁ reads as a space, except in the first token, where it is dropped.
    size_t pos = 0;
    while (pos < token->size()) {
      const size_t hit = token->find(kMetaspace, pos);
      out.append(*token, pos, hit == std::string::npos ? std::string::npos : hit - pos);
      if (hit == std::string::npos) break;
      if (!first) out.push_back(' ');
      pos = hit + kMetaspace.size();
    }
    first = false;
  }
  return out;
}

std::optional<int64_t> SentencePieceTokenizer::token_to_id(std::string_view token) const {
  if (const auto it = impl_->added_ids.find(std::string(token)); it != impl_->added_ids.end()) return it->second;
  const int64_t id = impl_->model.piece_to_id(token);
  if (id < 0 || static_cast<size_t>(id) >= impl_->pieces.size() || impl_->pieces[id] != token) return std::nullopt;
  return id;
}

std::optional<std::string> SentencePieceTokenizer::id_to_token(int64_t id) const {
  if (const auto it = impl_->added_by_id.find(id); it != impl_->added_by_id.end()) {
    return impl_->added[it->second].content;
  }
  if (id < 0 || id >= static_cast<int64_t>(impl_->pieces.size())) return std::nullopt;
  return impl_->pieces[id];
}

bool SentencePieceTokenizer::is_special(int64_t id) const {
  const auto it = impl_->added_by_id.find(id);
  return it != impl_->added_by_id.end() && impl_->added[it->second].special;
}

int64_t SentencePieceTokenizer::vocab_size() const { return impl_->size; }
int64_t SentencePieceTokenizer::eos_token_id() const { return impl_->eos; }
int64_t SentencePieceTokenizer::pad_token_id() const { return impl_->pad; }
int64_t SentencePieceTokenizer::unk_token_id() const { return impl_->unk; }

}  // namespace mm
