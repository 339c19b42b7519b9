// Typed reading of one section of a YAML run config: every key read is remembered, so whatever
// is left over is reported as unknown (a typo must not silently train something else), and every
// error names the file, the section and the key.
#pragma once
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "mm/core/error.h"

namespace mm {

class ConfigSection {
 public:
  // A missing or empty section reads as an empty mapping: every key keeps its default.
  ConfigSection(const YAML::Node& root, const std::string& file, const std::string& name)
      : node_(section_of(root, file, name)), file_(file), name_(name) {}

  template <typename T>
  void read(const std::string& key, T& out) {
    keys_.insert(key);
    const YAML::Node value = node_[key];  // const lookup: never adds the key
    if (!value.IsDefined() || value.IsNull()) return;
    try {
      out = value.template as<T>();
    } catch (const YAML::Exception&) {
      fail(file_, ": ", name_, ".", key, ": has the wrong type (", YAML::Dump(value), ")");
    }
  }
  void read(const std::string& key, std::filesystem::path& out) {
    std::string s;
    read(key, s);
    if (!s.empty()) out = s;
  }
  template <typename T>
  void read(const std::string& key, std::optional<T>& out) {
    T value{};
    keys_.insert(key);
    const YAML::Node given = node_[key];
    if (!given.IsDefined() || given.IsNull()) return;
    read(key, value);
    out = value;
  }
  // An enumerated value, parsed once: `out` keeps its default when the key is absent; a name
  // outside `names` fails listing them.
  template <typename E>
  void read_enum(const std::string& key, E& out, std::initializer_list<std::pair<const char*, E>> names) {
    std::optional<std::string> value;
    read(key, value);
    if (!value) return;
    std::string list;
    for (const auto& [name, e] : names) {
      if (*value == name) {
        out = e;
        return;
      }
      list += (list.empty() ? "" : ", ") + std::string(name);
    }
    fail(file_, ": ", name_, ".", key, ": '", *value, "' is not one of ", list);
  }
  void check(bool ok, const std::string& key, const std::string& what) {
    MM_CHECK(ok, file_, ": ", name_, ".", key, ": ", what);
  }
  // Every key present must have been read.
  void finish() {
    for (const auto& kv : node_) {
      const auto key = kv.first.as<std::string>();
      MM_CHECK(keys_.count(key), file_, ": ", name_, ".", key, ": unknown key (known: ", known(), ")");
    }
  }

 private:
  static YAML::Node section_of(const YAML::Node& root, const std::string& file, const std::string& name) {
    const YAML::Node section = root[name];  // const lookup: an absent key gives an invalid node
    if (!section.IsDefined() || section.IsNull()) return YAML::Node(YAML::NodeType::Map);
    MM_CHECK(section.IsMap(), file, ": ", name, ": must be a mapping");
    return section;
  }
  std::string known() const {
    std::string out;
    for (const auto& k : keys_) out += (out.empty() ? "" : ", ") + k;
    return out;
  }
  const YAML::Node node_;
  std::string file_, name_;
  std::set<std::string> keys_;
};

}  // namespace mm
