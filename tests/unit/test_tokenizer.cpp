// Byte-level BPE tokenizer against the `tokenizers` library (oracle: tokenizer_corpus.py):
// identical ids on every corpus line (multilingual, emoji, code, white space, special and added
// tokens, invalid UTF-8), identical decodes, the same under other supported settings, and
// errors that name the file and field for broken tokenizer.json / tokenizer_config.json.
#include <chrono>
#include <fstream>
#include <functional>
#include <thread>

#include "mm/core/json_config.h"
#include "mm/tokenizer/bpe_tokenizer.h"
#include "mm/tokenizer/unicode_text.h"
#include "testing.h"

namespace {

using mm::Tokenizer;
using nlohmann::json;

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

std::filesystem::path golden() { return mm::testing::golden_dir("tokenizer_corpus"); }

const json& cases_file() {
  static const json cases = mm::read_json_file(golden() / "cases.json");
  return cases;
}

const Tokenizer& reference_dir_tokenizer() {
  static const Tokenizer tokenizer = Tokenizer::from_dir(golden());
  return tokenizer;
}

struct Case {
  std::string name, bytes, nfc, decoded, decoded_skip;
  std::vector<int64_t> ids;
  bool valid_utf8, roundtrip;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const auto& c : cases_file()["cases"]) {
    out.push_back({c["name"], from_hex(c["hex"]), from_hex(c["nfc_hex"]), from_hex(c["decoded_hex"]),
                   from_hex(c["decoded_skip_hex"]), c["ids"].get<std::vector<int64_t>>(), c["valid_utf8"],
                   c["roundtrip"]});
  }
  return out;
}

// Number of lines whose encoding differs from `expected` (reported per line).
int count_mismatches(const Tokenizer& tokenizer, const std::vector<std::vector<int64_t>>& expected) {
  const auto all = cases();
  EXPECT_EQ(all.size(), expected.size());
  int mismatches = 0;
  for (size_t i = 0; i < all.size() && i < expected.size(); ++i) {
    const auto ids = tokenizer.encode(all[i].bytes);
    if (ids != expected[i]) {
      ++mismatches;
      ADD_FAILURE() << all[i].name << ": ids differ from the reference (" << ids.size() << " vs "
                    << expected[i].size() << " ids): " << json(ids).dump().substr(0, 200);
    }
  }
  return mismatches;
}

std::vector<std::vector<int64_t>> reference_ids() {
  std::vector<std::vector<int64_t>> ids;
  for (const Case& c : cases()) ids.push_back(c.ids);
  return ids;
}

json golden_tokenizer_json() { return mm::read_json_file(golden() / "tokenizer.json"); }

void write_json(const std::filesystem::path& path, const json& value) {
  std::ofstream(path) << value.dump();
}

// A tokenizer directory holding the golden tokenizer.json edited by `edit`.
std::filesystem::path edited_tokenizer(const std::string& name, const std::function<void(json&)>& edit) {
  const auto dir = mm::testing::temp_dir("tokenizer_" + name);
  json spec = golden_tokenizer_json();
  edit(spec);
  write_json(dir / "tokenizer.json", spec);
  return dir;
}

TEST(Tokenizer, IdsMatchReferenceOnEveryLine) {
  const auto all = cases();
  ASSERT_GT(all.size(), 200u);
  EXPECT_EQ(count_mismatches(reference_dir_tokenizer(), reference_ids()), 0);
}

TEST(Tokenizer, FromFileGivesTheSameIds) {
  EXPECT_EQ(count_mismatches(Tokenizer::from_file(golden() / "tokenizer.json"), reference_ids()), 0);
}

TEST(Tokenizer, DecodeMatchesReference) {
  const Tokenizer& tokenizer = reference_dir_tokenizer();
  for (const Case& c : cases()) {
    EXPECT_EQ(tokenizer.decode(c.ids), c.decoded) << c.name;
    EXPECT_EQ(tokenizer.decode(c.ids, /*skip_special_tokens=*/true), c.decoded_skip) << c.name;
  }
}

// decode(encode(x)) gives back NFC(x) for valid UTF-8 lines, except where added tokens change the
// text on purpose — lstrip/rstrip swallow spaces ([MASK]); the normalized added token "café" has
// characters that the ByteLevel decoder reads as bytes — which the oracle marks.
TEST(Tokenizer, DecodeOfEncodeRoundTrips) {
  const Tokenizer& tokenizer = reference_dir_tokenizer();
  int checked = 0, lossy = 0;
  for (const Case& c : cases()) {
    if (!c.valid_utf8) continue;
    if (!c.roundtrip) {
      ++lossy;
      EXPECT_TRUE(c.nfc.find("café") != std::string::npos || c.nfc.find("[MASK]") != std::string::npos) << c.name;
      continue;
    }
    EXPECT_EQ(tokenizer.decode(tokenizer.encode(c.bytes)), c.nfc) << c.name;
    ++checked;
  }
  EXPECT_GT(checked, 180);
  EXPECT_GE(lossy, 2);
}

TEST(Tokenizer, NormalizationAndUtf8RepairMatchPython) {
  int invalid = 0;
  for (const Case& c : cases()) {
    EXPECT_EQ(mm::unicode::is_valid_utf8(c.bytes), c.valid_utf8) << c.name;
    // nfc = NFC(bytes.decode("utf-8", errors="replace")) in Python.
    EXPECT_EQ(mm::unicode::normalize(mm::unicode::repair_utf8(c.bytes), mm::unicode::NormalForm::nfc), c.nfc)
        << c.name;
    invalid += !c.valid_utf8;
  }
  EXPECT_GE(invalid, 9);
}

TEST(Tokenizer, VariantsMatchReference) {
  for (const std::string name : {"gpt2_style", "ignore_merges", "nfkc_legacy_merges", "template_processing"}) {
    SCOPED_TRACE(name);
    const auto dir = golden() / "variants" / name;
    const auto expected = mm::read_json_file(dir / "ids.json").get<std::vector<std::vector<int64_t>>>();
    EXPECT_EQ(count_mismatches(Tokenizer::from_file(dir / "tokenizer.json"), expected), 0);
  }
  // The variant differs from the base tokenizer on some lines, so it tests its setting.
  const auto ignore = mm::read_json_file(golden() / "variants/ignore_merges/ids.json");
  EXPECT_NE(ignore.get<std::vector<std::vector<int64_t>>>(), reference_ids());
}

TEST(Tokenizer, BothMergeFormatsGiveTheSameIds) {
  const auto dir = edited_tokenizer("string_merges", [](json& spec) {
    json merges = json::array();
    for (const auto& pair : spec["model"]["merges"]) {
      ASSERT_TRUE(pair.is_array());  // tokenizers 0.23 saves pairs; turn them into "a b" strings
      merges.push_back(pair[0].get<std::string>() + " " + pair[1].get<std::string>());
    }
    spec["model"]["merges"] = merges;
  });
  EXPECT_EQ(count_mismatches(Tokenizer::from_file(dir / "tokenizer.json"), reference_ids()), 0);
}

TEST(Tokenizer, SpecialTokensFromTokenizerConfig) {
  const Tokenizer& tokenizer = reference_dir_tokenizer();
  const json& special = cases_file()["special"];
  ASSERT_TRUE(tokenizer.eos_token() && tokenizer.pad_token());
  EXPECT_EQ(*tokenizer.eos_token(), special["eos_token"].get<std::string>());
  EXPECT_EQ(*tokenizer.eos_token_id(), special["eos_token_id"].get<int64_t>());
  EXPECT_EQ(*tokenizer.pad_token(), special["pad_token"].get<std::string>());
  EXPECT_EQ(*tokenizer.pad_token_id(), special["pad_token_id"].get<int64_t>());
  EXPECT_FALSE(tokenizer.bos_token());
  EXPECT_FALSE(tokenizer.bos_token_id());
  EXPECT_EQ(tokenizer.vocab_size(), cases_file()["vocab_size"].get<int64_t>());
  EXPECT_EQ(tokenizer.vocab_size(), special["transformers_len"].get<int64_t>());
  EXPECT_EQ(tokenizer.token_to_id("<|im_start|>"), special["im_start_id"].get<int64_t>());
  EXPECT_EQ(tokenizer.token_to_id("<|image_pad|>"), special["image_pad_id"].get<int64_t>());
  EXPECT_EQ(tokenizer.id_to_token(special["image_pad_id"].get<int64_t>()), "<|image_pad|>");
  EXPECT_TRUE(tokenizer.is_special(*tokenizer.eos_token_id()));
  EXPECT_FALSE(tokenizer.is_special(*tokenizer.token_to_id("<tool_call>")));
  EXPECT_FALSE(tokenizer.token_to_id("<|no such token|>"));
  EXPECT_FALSE(tokenizer.id_to_token(tokenizer.vocab_size()));
  EXPECT_FALSE(Tokenizer::from_file(golden() / "tokenizer.json").eos_token());
  // Every id maps to a token and back.
  for (int64_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const auto token = tokenizer.id_to_token(id);
    ASSERT_TRUE(token) << id;
    EXPECT_EQ(tokenizer.token_to_id(*token), id) << *token;
  }
}

TEST(Tokenizer, AddedTokensDecoderAddsMissingTokens) {
  const auto dir = edited_tokenizer("config_added", [](json&) {});
  json config = mm::read_json_file(golden() / "tokenizer_config.json");
  const int64_t new_id = reference_dir_tokenizer().vocab_size();
  config["added_tokens_decoder"][std::to_string(new_id)] = {{"content", "<|new_special|>"}, {"lstrip", false},
      {"normalized", false}, {"rstrip", false}, {"single_word", false}, {"special", true}};
  config["eos_token"] = {{"content", "<|new_special|>"}, {"__type", "AddedToken"}};
  write_json(dir / "tokenizer_config.json", config);
  const Tokenizer tokenizer = Tokenizer::from_dir(dir);
  EXPECT_EQ(tokenizer.vocab_size(), new_id + 1);
  EXPECT_EQ(tokenizer.eos_token_id(), new_id);
  const auto ids = tokenizer.encode("a<|new_special|>b");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[1], new_id);
  EXPECT_TRUE(tokenizer.is_special(new_id));
  EXPECT_EQ(tokenizer.decode(ids, true), "ab");
}

TEST(Tokenizer, DecodeSkipsUnknownIds) {
  const Tokenizer& tokenizer = reference_dir_tokenizer();
  const auto ids = tokenizer.encode("hello");
  auto with_unknown = ids;
  with_unknown.insert(with_unknown.begin(), -1);
  with_unknown.push_back(tokenizer.vocab_size() + 100);
  EXPECT_EQ(tokenizer.decode(with_unknown), "hello");
}

TEST(Tokenizer, ConcurrentEncodingIsConsistent) {
  const Tokenizer& tokenizer = reference_dir_tokenizer();
  const auto all = cases();
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < all.size() * 2; ++i) {
        const Case& c = all[(i * 7 + t) % all.size()];
        mismatches[t] += tokenizer.encode(c.bytes) != c.ids;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

// Not a timed test: it reports throughput (the benchmark in bench/ measures it properly) and
// checks that a large multilingual input round-trips.
TEST(Tokenizer, EncodesOneMegabyte) {
  const Tokenizer tokenizer = Tokenizer::from_dir(golden());  // cold cache
  const auto all = cases();
  std::string text;
  for (size_t i = 0; text.size() < (1u << 20); ++i) {
    const Case& c = all[i % all.size()];
    if (c.name.rfind("random_", 0) != 0 || !c.roundtrip) continue;
    text += c.bytes;
    text += "\n\n";
  }
  const auto start = std::chrono::steady_clock::now();
  const auto ids = tokenizer.encode(text);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("encoded %.2f MB into %zu ids in %.3f s (%.1f MB/s)\n", text.size() / 1e6, ids.size(), seconds,
              text.size() / 1e6 / seconds);
  EXPECT_EQ(tokenizer.decode(ids), mm::unicode::normalize(text, mm::unicode::NormalForm::nfc));
}

TEST(TokenizerErrors, BrokenTokenizerJson) {
  struct Broken {
    std::string name;
    std::function<void(json&)> edit;
    std::string message;
  };
  const std::vector<Broken> broken = {
      {"model_type", [](json& s) { s["model"]["type"] = "WordPiece"; },
       "tokenizer.json: model.type: unsupported model \"WordPiece\" (supported: BPE)"},
      {"no_model_type", [](json& s) { s["model"].erase("type"); }, "tokenizer.json: model.type: missing"},
      {"no_model", [](json& s) { s.erase("model"); }, "tokenizer.json: model: missing"},
      {"no_merges", [](json& s) { s["model"].erase("merges"); }, "tokenizer.json: model.merges: missing"},
      {"no_vocab", [](json& s) { s["model"].erase("vocab"); }, "tokenizer.json: model.vocab: missing"},
      {"merge_oov", [](json& s) { s["model"]["merges"][3] = json::array({"Ġ", "nope"}); },
       "tokenizer.json: model.merges[3]: token \"nope\" is not in model.vocab"},
      {"merge_format", [](json& s) { s["model"]["merges"][0] = "abc"; },
       "tokenizer.json: model.merges[0]: expected two tokens separated by one space"},
      {"vocab_id", [](json& s) { s["model"]["vocab"]["a"] = "x"; }, "model.vocab[\"a\"]: expected a non-negative"},
      {"dropout", [](json& s) { s["model"]["dropout"] = 0.1; }, "tokenizer.json: model.dropout: 0.1 is not supported"},
      {"byte_fallback", [](json& s) { s["model"]["byte_fallback"] = true; }, "model.byte_fallback: true is not supported"},
      {"suffix", [](json& s) { s["model"]["end_of_word_suffix"] = "</w>"; }, "model.end_of_word_suffix: \"</w>\""},
      {"normalizer", [](json& s) { s["normalizer"] = {{"type", "Lowercase"}}; },
       "tokenizer.json: normalizer.type: unsupported normalizer \"Lowercase\""},
      {"normalizer_seq", [](json& s) { s["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Strip"}}}}}; },
       "tokenizer.json: normalizer.normalizers[1].type: unsupported normalizer \"Strip\""},
      {"pre_tokenizer", [](json& s) { s["pre_tokenizer"]["pretokenizers"][1] = {{"type", "Metaspace"}}; },
       "tokenizer.json: pre_tokenizer.pretokenizers[1].type: unsupported pre-tokenizer \"Metaspace\""},
      {"regex", [](json& s) { s["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed"; },
       "tokenizer.json: pre_tokenizer.pretokenizers[0].pattern: cannot compile the regex \"(unclosed\""},
      {"behavior", [](json& s) { s["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithNext"; },
       "pre_tokenizer.pretokenizers[0].behavior: unsupported \"MergedWithNext\""},
      {"decoder", [](json& s) { s["decoder"] = {{"type", "WordPiece"}}; },
       "tokenizer.json: decoder: unsupported decoder \"WordPiece\""},
      {"post_processor", [](json& s) { s["post_processor"] = {{"type", "BertProcessing"}}; },
       "tokenizer.json: post_processor.type: unsupported post-processor \"BertProcessing\""},
      {"template", [](json& s) { s["post_processor"] = {{"type", "TemplateProcessing"}}; },
       "tokenizer.json: post_processor.single: expected an array"},
      {"template_ids",
       [](json& s) {
         s["post_processor"] = json::parse(
             R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}]})");
       },
       "tokenizer.json: post_processor.special_tokens: no ids for \"<s>\""},
      {"added_token", [](json& s) { s["added_tokens"][0].erase("content"); },
       "tokenizer.json: added_tokens[0].content: expected a string"},
  };
  for (const Broken& b : broken) {
    SCOPED_TRACE(b.name);
    const auto dir = edited_tokenizer("broken_" + b.name, b.edit);
    EXPECT_THROW_MSG(Tokenizer::from_file(dir / "tokenizer.json"), b.message);
  }
}

TEST(TokenizerErrors, BrokenFilesAndConfig) {
  const auto dir = edited_tokenizer("broken_config", [](json&) {});
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "<|nope|>"})";
  EXPECT_THROW_MSG(Tokenizer::from_dir(dir), "tokenizer_config.json: eos_token: \"<|nope|>\" is not in the vocabulary");
  std::ofstream(dir / "tokenizer_config.json") << R"({"pad_token": 7})";
  EXPECT_THROW_MSG(Tokenizer::from_dir(dir), "tokenizer_config.json: pad_token: expected a string, null or");
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"added_tokens_decoder": {"5": {"content": "<|im_end|>", "special": true}}})";
  EXPECT_THROW_MSG(Tokenizer::from_dir(dir), "tokenizer_config.json: added_tokens_decoder[\"5\"]: \"<|im_end|>\" has id");
  std::ofstream(dir / "tokenizer_config.json") << R"({"added_tokens_decoder": {"x": {"content": "<|a|>"}}})";
  EXPECT_THROW_MSG(Tokenizer::from_dir(dir), "added_tokens_decoder[\"x\"]: the key must be a non-negative integer id");
  std::ofstream(dir / "tokenizer.json") << "{ not json";
  EXPECT_THROW_MSG(Tokenizer::from_dir(dir), "tokenizer.json: malformed JSON");
  EXPECT_THROW_MSG(Tokenizer::from_dir(dir / "missing"), "no tokenizer.json in this directory");
}

}  // namespace
