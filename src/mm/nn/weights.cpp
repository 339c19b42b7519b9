#include "mm/nn/weights.h"

#include <c10/core/DefaultDtype.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <set>

#include "mm/core/error.h"
#include "mm/core/safetensors.h"

namespace mm {
namespace {

std::string shape_str(at::IntArrayRef shape) { return c10::str(shape); }

std::string join_first(const std::vector<std::string>& names, size_t limit = 10) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < limit; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > limit) out += str_cat(", ... (", names.size(), " in all)");
  return out;
}

}  // namespace

std::vector<std::pair<std::string, torch::Tensor>> named_weights(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) out.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers(/*recurse=*/true)) out.emplace_back(b.key(), b.value());
  return out;
}

DefaultDtypeGuard::DefaultDtypeGuard(torch::Dtype dtype) : previous_(c10::get_default_dtype()) {
  c10::set_default_dtype(caffe2::TypeMeta::fromScalarType(dtype));
}

DefaultDtypeGuard::~DefaultDtypeGuard() { c10::set_default_dtype(previous_); }

namespace {

std::vector<std::pair<std::string, torch::Tensor>> all_tensors(const Checkpoint& checkpoint) {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& name : checkpoint.names()) tensors.emplace_back(name, checkpoint.tensor(name));
  return tensors;
}

}  // namespace

std::vector<std::pair<std::string, torch::Tensor>> match_weights(
    const torch::nn::Module& module, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
    const std::string& source, const WeightLoadOptions& options) {
  std::map<std::string, torch::Tensor> targets;
  for (auto& [name, tensor] : named_weights(module)) targets.emplace(name, tensor);

  std::vector<std::string> unexpected, mismatched;
  std::map<std::string, torch::Tensor> matched;
  for (const auto& [ckpt_name, tensor] : tensors) {
    const std::string name =
        options.checkpoint_to_module ? options.checkpoint_to_module(ckpt_name) : ckpt_name;
    if (name.empty()) continue;
    auto it = targets.find(name);
    if (it == targets.end()) {
      unexpected.push_back(ckpt_name);
      continue;
    }
    if (tensor.sizes() != it->second.sizes()) {
      mismatched.push_back(str_cat(ckpt_name, " is ", shape_str(tensor.sizes()), ", expected ",
                                   shape_str(it->second.sizes())));
      continue;
    }
    MM_CHECK(matched.emplace(name, tensor).second, source, ": two checkpoint tensors map to ", name);
  }
  std::vector<std::string> missing;
  for (const auto& [name, _] : targets)
    if (!matched.count(name) &&
        std::find(options.optional.begin(), options.optional.end(), name) == options.optional.end())
      missing.push_back(name);

  std::string problems;
  if (!mismatched.empty()) problems += "; wrong shape: " + join_first(mismatched);
  if (!missing.empty()) problems += "; missing: " + join_first(missing);
  if (!unexpected.empty()) problems += "; unexpected: " + join_first(unexpected);
  MM_CHECK(problems.empty(), "checkpoint ", source, " does not match the model", problems);
  // In the module's order.
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& [name, _] : named_weights(module))
    if (auto it = matched.find(name); it != matched.end()) out.emplace_back(name, it->second);
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> match_weights(const torch::nn::Module& module,
                                                                 const Checkpoint& checkpoint,
                                                                 const WeightLoadOptions& options) {
  return match_weights(module, all_tensors(checkpoint), checkpoint.path().string(), options);
}

void load_weights(torch::nn::Module& module, const Checkpoint& checkpoint, const WeightLoadOptions& options) {
  load_weights(module, all_tensors(checkpoint), checkpoint.path().string(), options);
}

void load_weights(torch::nn::Module& module, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                  const std::string& source, const WeightLoadOptions& options) {
  // Everything is checked before anything is copied: a wrong checkpoint leaves the module as it was.
  const auto matched = match_weights(module, tensors, source, options);
  std::map<std::string, torch::Tensor> targets;
  for (auto& [name, tensor] : named_weights(module)) targets.emplace(name, tensor);
  torch::NoGradGuard no_grad;
  for (const auto& [name, tensor] : matched) {
    targets.at(name).copy_(tensor);
    release_mapped_pages(tensor);
  }
}

}  // namespace mm
