#include "mm/train/checkpoint_export.h"

#include <torch/torch.h>

#include "mm/checkpoint/hf_export.h"
#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/core/output_dir.h"
#include "mm/core/safetensors.h"
#include "mm/models/common/weights.h"
#include "mm/train/checkpoint_io.h"
#include "mm/train/lora.h"

namespace fs = std::filesystem;

namespace mm {

fs::path resolve_training_checkpoint(const fs::path& path) {
  MM_CHECK(fs::exists(path), "checkpoint ", path.string(), " does not exist");
  if (fs::is_regular_file(path / "trainer_state.json")) return path;
  for (const auto& dir : {path, path / "checkpoints"})
    if (auto latest = latest_checkpoint(dir)) return *latest;
  fail(path.string(), " is not a training checkpoint (no trainer_state.json) and holds no checkpoints/latest");
}

Qwen2_5_VLForConditionalGeneration load_checkpoint_model(const fs::path& dir) {
  const auto loaded = load_whole_training_checkpoint(dir);
  Qwen2_5_VLForConditionalGeneration model(Qwen2_5_VLConfig::from_file(dir / "config.json"));
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

fs::path export_training_checkpoint(const fs::path& path, const fs::path& out) {
  check_new_output_dir(out, "--to-hf");
  const auto dir = resolve_training_checkpoint(path);
  auto model = load_checkpoint_model(dir);
  export_hf(model, dir, out);
  return dir;
}

}  // namespace mm
