// The T5/umT5 SentencePiece tokenizer against transformers' AutoTokenizer on a tiny umT5-like
// model (oracle: sentencepiece_tokenizer.py): identical ids on every case (multilingual, emoji,
// unknown characters, NFKC, white space of every kind, literal special tokens, random mixes —
// including the cases where transformers and sentencepiece itself disagree), identical decodes,
// WanPipeline's padded/truncated batches and masks, T5Tokenizer's defaults without
// tokenizer.json; Wan's prompt cleaning identical to diffusers'; broken files named in errors.
#include <fstream>
#include <functional>

#include "mm/core/json_config.h"
#include "mm/tokenizer/html_unescape.h"
#include "mm/tokenizer/prompt_clean.h"
#include "mm/tokenizer/sentencepiece_tokenizer.h"
#include "mm/tokenizer/unicode_text.h"
#include "testing.h"

namespace {

namespace fs = std::filesystem;
using mm::SentencePieceTokenizer;
using nlohmann::json;

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

fs::path golden() { return mm::testing::golden_dir("sentencepiece_tokenizer"); }

const json& cases_file() {
  static const json cases = mm::read_json_file(golden() / "cases.json");
  return cases;
}

const SentencePieceTokenizer& reference() {
  static const SentencePieceTokenizer tokenizer = SentencePieceTokenizer::from_dir(golden() / "tokenizer");
  return tokenizer;
}

std::string show(const std::vector<int64_t>& ids) {
  std::string out;
  for (const int64_t id : ids) out += std::to_string(id) + " ";
  return out;
}

TEST(SentencePieceTokenizer, IdsMatchTransformers) {
  const auto& tokenizer = reference();
  int cases = 0, mismatches = 0, spm_disagreements = 0;
  for (const auto& c : cases_file()["cases"]) {
    const auto expected = c["ids"].get<std::vector<int64_t>>();
    const auto ids = tokenizer.encode(from_hex(c["hex"]));
    ++cases;
    if (ids != expected) {
      ++mismatches;
      ADD_FAILURE() << c["name"] << ": ours " << show(ids) << "\n transformers " << show(expected);
    }
    auto without_eos = expected;
    without_eos.pop_back();
    if (without_eos != c["spm_ids"].get<std::vector<int64_t>>()) ++spm_disagreements;
  }
  EXPECT_EQ(cases, 521);
  EXPECT_EQ(mismatches, 0);
  std::cout << cases << " cases, " << mismatches << " mismatches (" << spm_disagreements
            << " of them where transformers and plain sentencepiece disagree)\n";
  // The cases exercise the transformers-only behaviour, not just what sentencepiece agrees on.
  EXPECT_GT(spm_disagreements, 20);
}

TEST(SentencePieceTokenizer, DecodeMatchesTransformersAndRoundTrips) {
  const auto& tokenizer = reference();
  int cases = 0, round_trips = 0;
  for (const auto& c : cases_file()["cases"]) {
    const auto ids = c["ids"].get<std::vector<int64_t>>();
    EXPECT_EQ(tokenizer.decode(ids), from_hex(c["decoded_hex"])) << c["name"];
    const std::string skipped = tokenizer.decode(ids, true);
    EXPECT_EQ(skipped, from_hex(c["decoded_skip_hex"])) << c["name"];
    // Text without unknown characters comes back as its normalized, space-collapsed self.
    if (tokenizer.encode(skipped) == ids) ++round_trips;
    ++cases;
  }
  EXPECT_EQ(cases, 521);
  EXPECT_GT(round_trips, 30);
  EXPECT_EQ(tokenizer.decode(tokenizer.encode(" a cat  walking\non the street,\tat night. ")),
            "a cat walking on the street, at night.</s>");
  auto ids = tokenizer.encode("a cat", false);
  ids.insert(ids.begin() + 1, {999999, -1});
  EXPECT_EQ(tokenizer.decode(ids), "a cat") << "ids outside the vocabulary are skipped";
}

TEST(SentencePieceTokenizer, PaddedBatchesMatchTransformers) {
  const auto& tokenizer = reference();
  int batches = 0;
  for (const auto& b : cases_file()["batches"]) {
    std::vector<std::string> texts;
    for (const auto& h : b["hex"]) texts.push_back(from_hex(h));
    const int64_t max_length = b["max_length"];
    const auto batch = tokenizer.encode_batch(texts, max_length);
    ASSERT_EQ(batch.batch, static_cast<int64_t>(texts.size()));
    ASSERT_EQ(batch.length, max_length);
    std::vector<int64_t> ids, mask;
    for (const auto& row : b["input_ids"]) for (const auto& v : row) ids.push_back(v);
    for (const auto& row : b["attention_mask"]) for (const auto& v : row) mask.push_back(v);
    EXPECT_EQ(batch.input_ids, ids) << "max_length " << max_length;
    EXPECT_EQ(batch.attention_mask, mask) << "max_length " << max_length;
    ++batches;
  }
  EXPECT_EQ(batches, 3);
  EXPECT_THROW_MSG(tokenizer.encode_batch({"a"}, 1), "max_length must be > 1");
}

TEST(SentencePieceTokenizer, SpecialTokensAndVocabulary) {
  const auto& tokenizer = reference();
  const auto& special = cases_file()["special"];
  EXPECT_EQ(tokenizer.eos_token_id(), special["eos"].get<int64_t>());
  EXPECT_EQ(tokenizer.pad_token_id(), special["pad"].get<int64_t>());
  EXPECT_EQ(tokenizer.unk_token_id(), special["unk"].get<int64_t>());
  EXPECT_EQ(tokenizer.vocab_size(), cases_file()["vocab_size"].get<int64_t>());
  const int64_t pieces = cases_file()["spm_piece_size"];
  EXPECT_EQ(tokenizer.token_to_id("<extra_id_0>"), pieces + 99);
  EXPECT_EQ(tokenizer.token_to_id("<extra_id_99>"), pieces);
  EXPECT_EQ(tokenizer.id_to_token(1), "</s>");
  EXPECT_EQ(tokenizer.token_to_id("<0x41>").has_value(), true);
  EXPECT_FALSE(tokenizer.token_to_id("no such piece").has_value());
  EXPECT_TRUE(tokenizer.is_special(1));
  EXPECT_TRUE(tokenizer.is_special(pieces));
  EXPECT_FALSE(tokenizer.is_special(259));
  // Invalid UTF-8 reads as U+FFFD (unknown here), like bytes.decode(errors="replace").
  EXPECT_EQ(tokenizer.encode("a\xff"), tokenizer.encode("a\xEF\xBF\xBD"));
}

TEST(SentencePieceTokenizer, WithoutTokenizerJsonMatchesT5TokenizerDefaults) {
  const auto from_dir = SentencePieceTokenizer::from_dir(golden() / "spm_only");
  const auto from_file = SentencePieceTokenizer::from_file(golden() / "spm_only" / "spiece.model");
  int cases = 0;
  for (const auto& c : cases_file()["spm_only"]) {
    const auto expected = c["ids"].get<std::vector<int64_t>>();
    EXPECT_EQ(from_dir.encode(from_hex(c["hex"])), expected) << cases;
    EXPECT_EQ(from_file.encode(from_hex(c["hex"])), expected) << cases;
    ++cases;
  }
  EXPECT_EQ(cases, 21);
  EXPECT_EQ(from_file.vocab_size(), reference().vocab_size());
}

// A tokenizer directory without spiece.model (tokenizer.json carries the Unigram model), as
// transformers writes it, and its save_pretrained round trip: the oracle checked that transformers
// gives these directories the reference ids, so mmtrain must give them too.
TEST(SentencePieceTokenizer, TokenizerJsonWithoutSpieceModelGivesTheSameIds) {
  for (const char* dir : {"json_only", "resaved"}) {
    ASSERT_FALSE(fs::exists(golden() / dir / "spiece.model")) << dir;
    const auto tokenizer = SentencePieceTokenizer::from_dir(golden() / dir);
    int cases = 0, mismatches = 0;
    for (const auto& c : cases_file()["cases"]) {
      const auto ids = tokenizer.encode(from_hex(c["hex"]));
      if (ids != c["ids"].get<std::vector<int64_t>>()) ++mismatches;
      EXPECT_EQ(tokenizer.decode(ids), from_hex(c["decoded_hex"])) << dir << " " << c["name"];
      ++cases;
    }
    EXPECT_EQ(cases, 521) << dir;
    EXPECT_EQ(mismatches, 0) << dir;
    EXPECT_EQ(tokenizer.vocab_size(), reference().vocab_size()) << dir;
    EXPECT_EQ(tokenizer.eos_token_id(), reference().eos_token_id()) << dir;
  }
}

// What tokenizer.json may hold that this tokenizer does not run is refused, naming the field.
TEST(SentencePieceTokenizer, TokenizerJsonItCannotRunIsNamed) {
  const auto original = mm::read_json_file(golden() / "json_only" / "tokenizer.json");
  const auto refused = [&](const std::string& name, const std::function<void(json&)>& edit) {
    auto spec = original;
    edit(spec);
    const auto dir = mm::testing::temp_dir("spm_json_" + name);
    std::ofstream(dir / "tokenizer.json") << spec.dump();
    fs::copy_file(golden() / "json_only" / "tokenizer_config.json", dir / "tokenizer_config.json");
    return dir;
  };
  EXPECT_THROW_MSG(SentencePieceTokenizer::from_dir(refused("bpe", [](json& j) { j["model"]["type"] = "BPE"; })),
                   "model.type: 'BPE' is not a SentencePiece Unigram model");
  EXPECT_THROW_MSG(
      SentencePieceTokenizer::from_dir(refused("fallback", [](json& j) { j["model"]["byte_fallback"] = true; })),
      "model.byte_fallback: true is not supported");
  EXPECT_THROW_MSG(SentencePieceTokenizer::from_dir(refused("unk", [](json& j) { j["model"]["unk_id"] = 100000; })),
                   "model.unk_id 100000 is outside the vocabulary");
  EXPECT_THROW_MSG(
      SentencePieceTokenizer::from_dir(refused("vocab", [](json& j) { j["model"]["vocab"][5] = json::array({"x"}); })),
      "model.vocab[5]: expected [piece, score]");
  EXPECT_THROW_MSG(SentencePieceTokenizer::from_dir(
                       refused("norm", [](json& j) { j["normalizer"] = json{{"type", "NFKC"}}; })),
                   "normalizer {\"type\":\"NFKC\"} is not supported");
  EXPECT_THROW_MSG(SentencePieceTokenizer::from_dir(refused(
                       "pre", [](json& j) { j["pre_tokenizer"] = json{{"type", "Whitespace"}}; })),
                   "pre_tokenizer {\"type\":\"Whitespace\"} is not the T5/umT5 one");
  EXPECT_THROW_MSG(SentencePieceTokenizer::from_dir(refused("b64", [](json& j) {
                     j["normalizer"]["precompiled_charsmap"] = "not base64!";
                   })),
                   "normalizer.precompiled_charsmap: not valid base64");
}

TEST(SentencePieceTokenizer, BrokenFilesAreNamed) {
  const auto dir = mm::testing::temp_dir("spm_bad");
  EXPECT_THROW_MSG(SentencePieceTokenizer::from_dir(dir / "absent"), "tokenizer directory not found");
  fs::create_directories(dir / "empty");
  EXPECT_THROW_MSG(SentencePieceTokenizer::from_dir(dir / "empty"), (dir / "empty" / "spiece.model").string());
  EXPECT_THROW_MSG(SentencePieceTokenizer::from_file(dir / "none.model"), "none.model: SentencePiece model not found");

  std::ifstream in(golden() / "tokenizer" / "spiece.model", std::ios::binary);
  const std::string model((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir / name, std::ios::binary) << bytes;
    return dir / name;
  };
  EXPECT_THROW_MSG(SentencePieceTokenizer::from_file(write("truncated.model", model.substr(0, model.size() / 2))),
                   "truncated.model: not a SentencePiece model");
  EXPECT_THROW_MSG(SentencePieceTokenizer::from_file(write("text.model", "this is not a protobuf at all")),
                   "text.model: not a SentencePiece model");
  EXPECT_THROW_MSG(SentencePieceTokenizer::from_file(write("empty.model", "")), "empty.model: not a SentencePiece model");
  EXPECT_THROW_MSG(SentencePieceTokenizer::from_file(golden() / "bpe" / "spiece.model"),
                   "model_type 2 is not supported");

  // A tokenizer.json whose added token lacks its id, and one of another model type.
  fs::create_directories(dir / "bad_json");
  fs::copy_file(golden() / "tokenizer" / "spiece.model", dir / "bad_json" / "spiece.model");
  auto spec = mm::read_json_file(golden() / "tokenizer" / "tokenizer.json");
  spec["added_tokens"][1].erase("id");
  std::ofstream(dir / "bad_json" / "tokenizer.json") << spec.dump();
  EXPECT_THROW_MSG(SentencePieceTokenizer::from_dir(dir / "bad_json"), "tokenizer.json: added_tokens.1.id: missing");
  spec = mm::read_json_file(golden() / "tokenizer" / "tokenizer.json");
  spec["model"]["type"] = "BPE";
  std::ofstream(dir / "bad_json" / "tokenizer.json") << spec.dump();
  EXPECT_THROW_MSG(SentencePieceTokenizer::from_dir(dir / "bad_json"), "model.type: \"BPE\" is not a SentencePiece");
  fs::remove(dir / "bad_json" / "tokenizer.json");
  std::ofstream(dir / "bad_json" / "tokenizer_config.json") << R"({"extra_ids": "many"})";
  EXPECT_THROW_MSG(SentencePieceTokenizer::from_dir(dir / "bad_json"), "tokenizer_config.json: extra_ids: has the wrong type");
  std::ofstream(dir / "bad_json" / "tokenizer_config.json") << R"({"eos_token": "<end>"})";
  EXPECT_THROW_MSG(SentencePieceTokenizer::from_dir(dir / "bad_json"), "'<end>' is neither a piece");
  fs::remove_all(dir);
}

TEST(WanPromptClean, MatchesDiffusers) {
  int cases = 0;
  for (const auto& c : cases_file()["prompt_clean"]) {
    const std::string input = from_hex(c["hex"]);
    EXPECT_EQ(mm::wan_prompt_clean(input), from_hex(c["cleaned_hex"])) << "input: " << input;
    ++cases;
  }
  EXPECT_EQ(cases, 321);
}

TEST(WanPromptClean, PythonWhiteSpaceIsStrIsspace) {
  std::vector<char32_t> ours;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (mm::is_python_space(cp)) ours.push_back(cp);
  }
  std::vector<char32_t> python;
  for (const auto& cp : cases_file()["python_spaces"]) python.push_back(cp.get<char32_t>());
  EXPECT_EQ(ours, python);
  EXPECT_EQ(python.size(), 29u);
  // diffusers' `regex` \s: Unicode White_Space, without U+001C..U+001F.
  std::vector<char32_t> white_space, regex;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (mm::unicode::is_white_space(cp)) white_space.push_back(cp);
  }
  for (const auto& cp : cases_file()["regex_spaces"]) regex.push_back(cp.get<char32_t>());
  EXPECT_EQ(white_space, regex);
  EXPECT_EQ(regex.size(), 25u);
}

TEST(WanPromptClean, HtmlEntityTable) {
  EXPECT_STREQ(mm::html5_entity("amp;"), "&");
  EXPECT_STREQ(mm::html5_entity("amp"), "&");
  EXPECT_EQ(mm::html5_entity("hearts"), nullptr) << "hearts needs its ';'";
  EXPECT_STREQ(mm::html5_entity("NotNestedGreaterGreater;"), "\u2AA2\u0338");
  EXPECT_EQ(mm::html_unescape("&hearts;&hearts"), "\u2665&hearts");
}

}  // namespace
