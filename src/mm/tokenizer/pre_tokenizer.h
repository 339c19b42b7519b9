// tokenizer.json's "pre_tokenizer": splits normalized text into words and maps them to the
// model's alphabet. Supported: Split (a regex or a literal; behavior Isolated or Removed;
// invert false), ByteLevel (add_prefix_space, use_regex with GPT-2's pattern) and a Sequence of
// them — Qwen2 uses Sequence[Split(its pattern, Isolated), ByteLevel(use_regex=false)].
//
// Regexes run on PCRE2 (UTF, Unicode properties). `tokenizers` runs them on Oniguruma, whose
// `\s` / `\S` mean Unicode White_Space; PCRE2's `\s` also takes U+180E, so both are rewritten
// to \p{White_Space} / \P{White_Space} before compiling.
#pragma once
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace mm {

class Pcre2Regex;

class PreTokenizer {
 public:
  // `spec` is the "pre_tokenizer" value; errors name `where` (e.g. "tokenizer.json: pre_tokenizer").
  static PreTokenizer from_json(const nlohmann::json& spec, const std::string& where);

  // Appends the words of `text` (valid UTF-8), in order, empty words left out.
  void split(std::string_view text, std::vector<std::string>& words) const;

 private:
  struct Step {
    enum class Kind { split, byte_level } kind = Kind::split;
    std::shared_ptr<const Pcre2Regex> regex;  // split; byte_level with use_regex
    bool keep_matches = true;                 // split: Isolated (true) or Removed (false)
    bool add_prefix_space = false;            // byte_level
  };
  void add(const nlohmann::json& spec, const std::string& where);
  void apply(size_t step, std::string_view piece, std::vector<std::string>& words) const;

  std::vector<Step> steps_;
};

}  // namespace mm
