// Typed access to JSON configs (HF config.json, preprocessor_config.json, ...). Every error
// names the file and the dotted key path, e.g. "config.json: vision_config.depth: missing".
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "mm/core/error.h"

namespace mm {

nlohmann::json read_json_file(const std::filesystem::path& path);
// The same with every object's keys in the file's order (what a template's tojson prints).
nlohmann::ordered_json read_ordered_json_file(const std::filesystem::path& path);

class JsonView {
 public:
  JsonView(const nlohmann::json& json, std::string file, std::string prefix = "")
      : json_(&json), file_(std::move(file)), prefix_(std::move(prefix)) {}

  bool has(const std::string& key) const { return json_->contains(key) && !(*json_)[key].is_null(); }
  // The nested object at `key`; an absent key gives an empty object (all defaults).
  JsonView child(const std::string& key) const;
  const nlohmann::json& raw() const { return *json_; }
  std::string where(const std::string& key) const { return file_ + ": " + prefix_ + key; }

  template <typename T>
  T get(const std::string& key) const {
    MM_CHECK(has(key), where(key), ": missing required key");
    return convert<T>(key);
  }
  template <typename T>
  T get_or(const std::string& key, T fallback) const {
    return has(key) ? convert<T>(key) : fallback;
  }
  template <typename T>
  std::optional<T> get_optional(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    return convert<T>(key);
  }

 private:
  template <typename T>
  T convert(const std::string& key) const {
    try {
      return (*json_)[key].template get<T>();
    } catch (const nlohmann::json::exception&) {
      fail(where(key), ": has the wrong type (value ", (*json_)[key].dump(), ")");
    }
  }
  static const nlohmann::json& empty_object();
  const nlohmann::json* json_;
  std::string file_;
  std::string prefix_;
};

}  // namespace mm
