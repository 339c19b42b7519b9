#include "mm/nn/lora.h"

#include <torch/torch.h>

#include <algorithm>

#include "mm/core/error.h"
#include "mm/nn/linear.h"

namespace mm {
namespace {

std::string last_component(const std::string& name) {
  const auto dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

}  // namespace

int64_t apply_lora(torch::nn::Module& root, const LoraConfig& config) {
  MM_CHECK(config.rank > 0, "lora: rank must be positive, got ", config.rank);
  std::vector<std::pair<std::string, LinearImpl*>> targets;
  std::vector<std::string> linears;
  for (const auto& item : root.named_modules("", /*include_self=*/false)) {
    auto* linear = dynamic_cast<LinearImpl*>(item.value().get());
    if (!linear) continue;
    const std::string& name = item.key();
    linears.push_back(name);
    const auto& t = config.target_modules;
    const bool targeted = std::find(t.begin(), t.end(), last_component(name)) != t.end();
    const bool excluded = std::any_of(config.exclude_prefixes.begin(), config.exclude_prefixes.end(),
                                      [&](const std::string& p) { return name.rfind(p, 0) == 0; });
    if (targeted && !excluded) targets.emplace_back(name, linear);
  }
  if (targets.empty()) {
    std::string targets_list, names;
    for (const auto& t : config.target_modules) targets_list += (targets_list.empty() ? "" : ", ") + t;
    for (const auto& n : linears) names += (names.empty() ? "" : ", ") + n;
    fail("lora: no linear layer matches target_modules [", targets_list, "] outside the excluded prefixes; ",
         "the linear layers are: ", names.empty() ? "(none)" : names);
  }
  // Freeze first so that only the adapters added below train.
  for (auto& p : root.parameters()) p.set_requires_grad(false);
  for (auto& [name, linear] : targets) linear->add_lora(config.rank, config.alpha, config.dropout);
  return static_cast<int64_t>(targets.size());
}

void merge_lora(torch::nn::Module& root) {
  for (const auto& module : root.modules(/*include_self=*/true))
    if (auto* linear = dynamic_cast<LinearImpl*>(module.get())) linear->merge_lora();
}

}  // namespace mm
