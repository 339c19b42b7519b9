#include "mm/models/qwen_vl/qwen_vl_hf_export.h"

#include <torch/torch.h>

#include <map>

#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/core/output_dir.h"
#include "mm/core/safetensors.h"
#include "mm/models/qwen_vl/qwen_vl_state_dict.h"
#include "mm/nn/linear.h"
#include "mm/nn/weights.h"

namespace mm {
namespace {

namespace fs = std::filesystem;

std::string torch_dtype_name(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kFloat: return "float32";
    case c10::kBFloat16: return "bfloat16";
    case c10::kHalf: return "float16";
    case c10::kDouble: return "float64";
    default: fail("export_hf: unsupported weight dtype ", dtype);
  }
}

// The weights as transformers stores them (its names): adapters folded in, their own tensors dropped.
std::vector<std::pair<std::string, torch::Tensor>> export_tensors(QwenVLForConditionalGenerationImpl& model) {
  std::map<std::string, const LinearImpl*> adapted;  // "<linear>.weight" -> layer with an adapter
  for (const auto& item : model.named_modules("", /*include_self=*/false))
    if (const auto* linear = dynamic_cast<const LinearImpl*>(item.value().get()); linear && linear->has_lora())
      adapted.emplace(item.key() + ".weight", linear);
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (auto& [name, tensor] : named_weights(model)) {
    if (name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos) continue;
    const auto it = adapted.find(name);
    out.emplace_back(qwen_vl_hf_name(name), (it == adapted.end() ? tensor : it->second->merged_weight()).detach().to(torch::kCPU));
  }
  // Qwen3-VL-MoE's checkpoints hold each layer's experts fused.
  if (model.config().model_type() == "qwen3_vl_moe") return fuse_experts(std::move(out));
  return out;
}

// `top`'s keys over `base`'s, objects merged key by key; a null in `top` stays a null.
void overlay(nlohmann::json& base, const nlohmann::json& top) {
  for (const auto& [key, value] : top.items()) {
    if (value.is_object() && base.contains(key) && base[key].is_object())
      overlay(base[key], value);
    else
      base[key] = value;
  }
}

void write_export(QwenVLForConditionalGenerationImpl& model, const fs::path& assets_dir, const fs::path& dir) {
  auto tensors = export_tensors(model);
  MM_CHECK(!tensors.empty(), "export_hf: the model has no weights");
  // The model directory's own config.json is the truth: every key it holds is written back as it
  // was (token ids, layer types, keys this version does not model), so that transformers reads the
  // same model; the parsed config only fills in what the file lacks.
  auto config = model.config().to_json();
  if (fs::is_regular_file(assets_dir / "config.json")) overlay(config, read_json_file(assets_dir / "config.json"));
  config["dtype"] = torch_dtype_name(tensors.front().second.scalar_type());
  if (config.contains("torch_dtype")) config["torch_dtype"] = config["dtype"];  // transformers 4's name for it
  write_file_atomic(dir / "config.json", config.dump(2) + "\n");
  save_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}});
  for (const auto& file : hf_asset_files(assets_dir)) fs::copy_file(file, dir / file.filename());
}

}  // namespace

std::vector<fs::path> hf_asset_files(const fs::path& dir) {
  static const char* const kNames[] = {
      "generation_config.json", "tokenizer.json",           "tokenizer_config.json",
      "special_tokens_map.json", "added_tokens.json",       "vocab.json",
      "merges.txt",              "preprocessor_config.json", "video_preprocessor_config.json",
      "processor_config.json"};
  std::vector<fs::path> out;
  for (const char* name : kNames)
    if (fs::is_regular_file(dir / name)) out.push_back(dir / name);
  if (fs::is_directory(dir))
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.is_regular_file() && entry.path().filename().string().rfind("chat_template.", 0) == 0)
        out.push_back(entry.path());
  return out;
}

void export_hf(QwenVLForConditionalGeneration& model, const fs::path& assets_dir, const fs::path& out_dir) {
  MM_CHECK(fs::is_directory(assets_dir), "export_hf: assets directory ", assets_dir.string(), " is not a directory");
  write_directory_atomically(out_dir, "export_hf", [&](const fs::path& tmp) { write_export(*model, assets_dir, tmp); });
}

}  // namespace mm
