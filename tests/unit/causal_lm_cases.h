// The goldens of the causal-LM oracles (qwen3_text.py, qwen3_5_text.py): a model directory per
// config under the oracle's golden dir and cases_<config>.safetensors with <case>.<field> tensors
// (input_ids, attention_mask, labels, ...) and grad_names, the parameters whose gradients it holds.
#pragma once
#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "mm/core/safetensors.h"
#include "mm/models/qwen3/qwen3_causal_lm.h"
#include "testing.h"

namespace mm::testing {

inline std::shared_ptr<SafetensorsFile> causal_lm_cases(const std::string& oracle, const std::string& config) {
  return SafetensorsFile::open(golden_dir(oracle) / ("cases_" + config + ".safetensors"));
}

// A copy of `key`, or an undefined tensor when the case has no such field.
inline torch::Tensor case_field(const SafetensorsFile& file, const std::string& key) {
  return file.contains(key) ? file.tensor(key).clone() : torch::Tensor();
}

inline Qwen3Inputs causal_lm_inputs(const SafetensorsFile& file, const std::string& c) {
  Qwen3Inputs in;
  in.input_ids = case_field(file, c + ".input_ids");
  in.attention_mask = case_field(file, c + ".attention_mask");
  in.labels = case_field(file, c + ".labels");
  return in;
}

inline std::vector<std::string> grad_names(const SafetensorsFile& file) {
  auto bytes = file.tensor("grad_names").contiguous();
  std::istringstream text(std::string(bytes.data_ptr<uint8_t>(), bytes.data_ptr<uint8_t>() + bytes.numel()));
  std::vector<std::string> names;
  for (std::string line; std::getline(text, line);) names.push_back(line);
  return names;
}

// max |got - want| over max |want|.
inline double relative_diff(const torch::Tensor& got, const torch::Tensor& want) {
  return max_abs_diff(got, want) / std::max(want.abs().max().item<double>(), 1e-12);
}

}  // namespace mm::testing
