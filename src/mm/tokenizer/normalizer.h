// tokenizer.json's "normalizer": null, a Unicode normal form (NFC, NFD, NFKC, NFKD), or a
// Sequence of them. Qwen2 uses NFC.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "mm/tokenizer/unicode_text.h"

namespace mm {

class Normalizer {
 public:
  // `spec` is the "normalizer" value; errors name `where` (e.g. "tokenizer.json: normalizer").
  static Normalizer from_json(const nlohmann::json& spec, const std::string& where);
  // text must be valid UTF-8.
  std::string apply(std::string_view text) const;

 private:
  void add(const nlohmann::json& spec, const std::string& where);
  std::vector<unicode::NormalForm> forms_;
};

}  // namespace mm
