#include "mm/core/json_config.h"

#include <fstream>

namespace mm {

namespace {

template <typename Json>
Json parse_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  MM_CHECK(in.good(), "cannot open ", path.string());
  try {
    return Json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(path.string(), ": malformed JSON: ", e.what());
  }
}

}  // namespace

nlohmann::json read_json_file(const std::filesystem::path& path) { return parse_file<nlohmann::json>(path); }

nlohmann::ordered_json read_ordered_json_file(const std::filesystem::path& path) {
  return parse_file<nlohmann::ordered_json>(path);
}

const nlohmann::json& JsonView::empty_object() {
  static const nlohmann::json empty = nlohmann::json::object();
  return empty;
}

JsonView JsonView::child(const std::string& key) const {
  if (!has(key)) return JsonView(empty_object(), file_, prefix_ + key + ".");
  MM_CHECK((*json_)[key].is_object(), where(key), ": expected an object");
  return JsonView((*json_)[key], file_, prefix_ + key + ".");
}

}  // namespace mm
