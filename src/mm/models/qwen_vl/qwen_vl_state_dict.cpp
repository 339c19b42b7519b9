#include "mm/models/qwen_vl/qwen_vl_state_dict.h"

#include <string_view>

namespace mm {
namespace {

constexpr std::string_view kHfVision = "model.visual.";
constexpr std::string_view kHfLanguage = "model.language_model.";
constexpr std::string_view kVision = "visual.";
constexpr std::string_view kLanguage = "model.";

bool starts(std::string_view name, std::string_view prefix) { return name.substr(0, prefix.size()) == prefix; }

std::string replaced(std::string_view name, std::string_view prefix, std::string_view by) {
  return std::string(by) + std::string(name.substr(prefix.size()));
}

}  // namespace

std::string qwen_vl_module_name(const std::string& name, bool tied_embeddings) {
  if (starts(name, kHfLanguage)) return replaced(name, kHfLanguage, kLanguage);
  if (starts(name, kHfVision)) return replaced(name, kHfVision, kVision);
  if (tied_embeddings && name == "lm_head.weight") return "";
  return name;
}

std::string qwen_vl_hf_name(const std::string& name) {
  if (starts(name, kVision)) return replaced(name, kVision, kHfVision);
  if (starts(name, kLanguage)) return replaced(name, kLanguage, kHfLanguage);
  return name;
}

}  // namespace mm
