#include "mm/tasks/qwen_vl_checkpoint.h"

#include <torch/torch.h>

#include <algorithm>

#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/core/rng.h"
#include "mm/data/sampler.h"
#include "mm/models/qwen_vl/qwen_vl_hf_export.h"
#include "mm/nn/lora.h"
#include "mm/nn/weights.h"

namespace fs = std::filesystem;

namespace mm {

QwenVLForConditionalGeneration load_checkpoint_model(const fs::path& dir) {
  const auto loaded = load_whole_training_checkpoint(dir);
  // A run that trained (or carried) a multi-token-prediction head saved it: rebuild it so that the
  // export writes it back.
  const bool mtp = std::any_of(loaded.model.begin(), loaded.model.end(),
                               [](const auto& named) { return named.first.rfind("mtp.", 0) == 0; });
  QwenVLForConditionalGeneration model(QwenVLConfig::from_file(dir / "config.json"), mtp);
  const auto& lora = loaded.state.contains("lora") ? loaded.state["lora"] : nlohmann::json();
  if (!lora.is_null()) {
    const JsonView view(lora, (dir / "trainer_state.json").string(), "lora.");
    LoraConfig config;
    config.rank = view.get<int64_t>("rank");
    config.alpha = view.get<double>("alpha");
    config.dropout = view.get<double>("dropout");
    config.target_modules = view.get<std::vector<std::string>>("target_modules");
    config.exclude_prefixes = view.get<std::vector<std::string>>("exclude_prefixes");
    apply_lora(*model, config);
  }
  load_weights(*model, loaded.model, dir.string());
  model->eval();
  return model;
}

void export_qwen_vl_checkpoint(const fs::path& checkpoint_dir, const fs::path& out) {
  auto model = load_checkpoint_model(checkpoint_dir);
  export_hf(model, checkpoint_dir, out);
}

WholeTrainingCheckpoint qwen_vl_as_training_checkpoint(const fs::path& model_dir) {
  // With its multi-token-prediction head, as the trainer builds a model from this directory.
  auto model = QwenVLForConditionalGenerationImpl::from_pretrained(model_dir, torch::kFloat32, c10::kCPU,
                                                                   /*with_mtp=*/true);
  WholeTrainingCheckpoint whole;
  whole.dir = model_dir;
  whole.model = named_weights(*model);
  whole.rng = capture_rng_state().to_tensors();
  whole.state = {{"step", 0}, {"data", SamplerState{}.to_json()}, {"skipped", nlohmann::json::object()},
                 {"lora", nullptr}};
  whole.extra_files.push_back(model_dir / "config.json");
  for (const auto& file : hf_asset_files(model_dir)) whole.extra_files.push_back(file);
  return whole;
}

}  // namespace mm
