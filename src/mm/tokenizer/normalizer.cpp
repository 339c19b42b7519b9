#include "mm/tokenizer/normalizer.h"

#include <nlohmann/json.hpp>

#include "mm/core/error.h"

namespace mm {

Normalizer Normalizer::from_json(const nlohmann::json& spec, const std::string& where) {
  Normalizer normalizer;
  if (!spec.is_null()) normalizer.add(spec, where);
  return normalizer;
}

void Normalizer::add(const nlohmann::json& spec, const std::string& where) {
  MM_CHECK(spec.is_object() && spec.contains("type") && spec["type"].is_string(), where,
           ": expected an object with a \"type\"");
  const std::string type = spec["type"].get<std::string>();
  if (type == "NFC") {
    forms_.push_back(unicode::NormalForm::nfc);
  } else if (type == "NFD") {
    forms_.push_back(unicode::NormalForm::nfd);
  } else if (type == "NFKC") {
    forms_.push_back(unicode::NormalForm::nfkc);
  } else if (type == "NFKD") {
    forms_.push_back(unicode::NormalForm::nfkd);
  } else if (type == "Sequence") {
    MM_CHECK(spec.contains("normalizers") && spec["normalizers"].is_array(), where,
             ".normalizers: expected an array");
    for (size_t i = 0; i < spec["normalizers"].size(); ++i) {
      add(spec["normalizers"][i], str_cat(where, ".normalizers[", i, "]"));
    }
  } else {
    fail(where, ".type: unsupported normalizer \"", type,
         "\" (supported: null, NFC, NFD, NFKC, NFKD, Sequence of these)");
  }
}

std::string Normalizer::apply(std::string_view text) const {
  std::string out(text);
  for (unicode::NormalForm form : forms_) out = unicode::normalize(out, form);
  return out;
}

}  // namespace mm
