#include "mm/models/qwen_vl/qwen_vl_state_dict.h"

#include <ATen/ATen.h>

#include <map>
#include <string_view>

#include "mm/core/error.h"

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

std::string qwen_vl_module_name(const std::string& name, bool tied_embeddings, bool keep_mtp) {
  if (starts(name, kHfLanguage)) return replaced(name, kHfLanguage, kLanguage);
  if (starts(name, kHfVision)) return replaced(name, kHfVision, kVision);
  if (tied_embeddings && name == "lm_head.weight") return "";
  // Qwen3.5's multi-token-prediction head (mtp.*): inference does not use it, so a model built
  // without it skips it as transformers' Qwen3_5ForConditionalGeneration does.
  if (starts(name, "mtp.") && !keep_mtp) return "";
  return name;
}

namespace {

constexpr std::string_view kGateUp = "mlp.experts.gate_up_proj";
constexpr std::string_view kDown = "mlp.experts.down_proj";

bool ends(std::string_view name, std::string_view suffix) {
  return name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
}

}  // namespace

NamedTensors split_fused_experts(NamedTensors tensors, int64_t hidden, int64_t intermediate) {
  std::map<std::string, at::Tensor> down;  // layer prefix (up to "mlp.experts.") -> fused down_proj
  for (const auto& [name, tensor] : tensors)
    if (ends(name, kDown)) down[name.substr(0, name.size() - std::string_view("down_proj").size())] = tensor;
  NamedTensors out;
  for (auto& [name, tensor] : tensors) {
    if (ends(name, kDown)) continue;
    if (!ends(name, kGateUp)) {
      out.emplace_back(std::move(name), std::move(tensor));
      continue;
    }
    const std::string prefix = name.substr(0, name.size() - std::string_view("gate_up_proj").size());
    const auto it = down.find(prefix);
    MM_CHECK(it != down.end(), name, " has no ", prefix, "down_proj beside it");
    const at::Tensor& gate_up = tensor;
    const at::Tensor& d = it->second;
    const int64_t experts = gate_up.dim() == 3 ? gate_up.size(0) : 0, h = hidden, i = intermediate;
    auto shaped = [](const at::Tensor& t, std::vector<int64_t> shape) { return t.sizes() == at::IntArrayRef(shape); };
    // In memory (save_pretrained) first: transformers takes that one where both shapes fit.
    const bool gate_up_in_memory = shaped(gate_up, {experts, 2 * i, h});
    MM_CHECK(experts > 0 && (gate_up_in_memory || shaped(gate_up, {experts, h, 2 * i})), name, " is ",
             gate_up.sizes(), ", expected [experts, ", 2 * i, ", ", h, "] or [experts, ", h, ", ", 2 * i,
             "] (moe_intermediate_size ", i, ", hidden_size ", h, ")");
    const bool down_in_memory = shaped(d, {experts, h, i});
    MM_CHECK(down_in_memory || shaped(d, {experts, i, h}), it->first, "down_proj is ", d.sizes(), ", expected [",
             experts, ", ", h, ", ", i, "] or [", experts, ", ", i, ", ", h, "]");
    for (int64_t e = 0; e < experts; ++e) {
      const std::string expert = prefix + std::to_string(e) + ".";
      const at::Tensor rows = gate_up_in_memory ? gate_up[e] : gate_up[e].t();  // [2 * i, h]
      out.emplace_back(expert + "gate_proj.weight", rows.narrow(0, 0, i));
      out.emplace_back(expert + "up_proj.weight", rows.narrow(0, i, i));
      out.emplace_back(expert + "down_proj.weight", down_in_memory ? d[e] : d[e].t());
    }
    down.erase(it);
  }
  MM_CHECK(down.empty(), down.empty() ? "" : down.begin()->first + "down_proj", " has no gate_up_proj beside it");
  return out;
}

NamedTensors fuse_experts(NamedTensors tensors) {
  // <prefix "…mlp.experts.">, expert -> its three weights.
  struct Expert {
    at::Tensor gate, up, down;
  };
  std::map<std::string, std::map<int64_t, Expert>> layers;
  NamedTensors out;
  for (auto& [name, tensor] : tensors) {
    const size_t at = name.find("mlp.experts.");
    const auto dot = at == std::string::npos ? std::string::npos : name.find('.', at + 12);
    if (dot == std::string::npos || !ends(name, "_proj.weight")) {
      out.emplace_back(std::move(name), std::move(tensor));
      continue;
    }
    const std::string prefix = name.substr(0, at + 12), which = name.substr(dot + 1);
    Expert& e = layers[prefix][std::stoll(name.substr(at + 12, dot - at - 12))];
    (which == "gate_proj.weight" ? e.gate : which == "up_proj.weight" ? e.up : e.down) = tensor;
  }
  for (auto& [prefix, experts] : layers) {
    std::vector<at::Tensor> gate_up, down;
    for (auto& [index, e] : experts) {
      MM_CHECK(index == static_cast<int64_t>(gate_up.size()) && e.gate.defined() && e.up.defined() && e.down.defined(),
               "fuse_experts: ", prefix, index, " is not a complete expert in order");
      gate_up.push_back(at::cat({e.gate, e.up}, 0));  // [2 * intermediate, hidden]
      down.push_back(e.down);                          // [hidden, intermediate]
    }
    out.emplace_back(prefix + "gate_up_proj", at::stack(gate_up).contiguous());
    out.emplace_back(prefix + "down_proj", at::stack(down).contiguous());
  }
  return out;
}

std::string qwen_vl_hf_name(const std::string& name) {
  if (starts(name, kVision)) return replaced(name, kVision, kHfVision);
  if (starts(name, kLanguage)) return replaced(name, kLanguage, kHfLanguage);
  return name;
}

}  // namespace mm
