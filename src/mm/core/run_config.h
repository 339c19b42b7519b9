// YAML run configs with command-line overrides (`--set optim.lr=1e-4`).
#pragma once
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <string>
#include <vector>

namespace mm {

// Loads `path` and applies each "a.b.c=value" override in order; the value is parsed as YAML
// (numbers, booleans, lists like [1,2]). Errors name the file, line or override.
YAML::Node load_run_config(const std::filesystem::path& path,
                           const std::vector<std::string>& overrides = {});
void apply_override(YAML::Node& root, const std::string& assignment);

}  // namespace mm
