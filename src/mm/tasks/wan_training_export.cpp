#include "mm/tasks/wan_training_export.h"

#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <map>

#include "mm/core/error.h"
#include "mm/core/output_dir.h"
#include "mm/core/safetensors.h"
#include "mm/models/wan/wan_pipeline.h"
#include "mm/models/wan/wan_pipeline_random.h"
#include "mm/models/wan/wan_transformer_config.h"
#include "mm/nn/weights.h"

namespace fs = std::filesystem;

namespace mm {
namespace {

// `from`'s files under `to`, each hard-linked (no space used on one file system) or else copied:
// unlike a symbolic link, the result survives moving or copying the run, or deleting the source.
void link_or_copy_tree(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  for (const auto& entry : fs::recursive_directory_iterator(from)) {
    const auto target = to / fs::relative(entry.path(), from);
    if (entry.is_directory()) {
      fs::create_directories(target);
      continue;
    }
    std::error_code ec;
    fs::create_hard_link(entry.path(), target, ec);
    if (ec) fs::copy_file(entry.path(), target);
  }
}

}  // namespace

void write_wan_training_export(const VideoTrainConfig::Model& model, const WanModel* frozen,
                               const NamedTensors& transformer, const NamedTensors& ema, const fs::path& out) {
  const auto source = fs::absolute(model.path);
  MM_CHECK(fs::is_regular_file(source / "model_index.json"), "model.path: ", model.path.string(),
           " is not a diffusers pipeline directory (no model_index.json): the export takes the pipeline's other "
           "components from it");
  MM_CHECK(!model.random_frozen || frozen, "write_wan_training_export: model.random_frozen needs the run's model");
  write_directory_atomically(out, "export", [&](const fs::path& tmp) {
    for (const auto& entry : fs::directory_iterator(source)) {
      const auto name = entry.path().filename();
      if (name == "transformer" || name == "transformer_ema") continue;
      if (model.random_frozen && (name == "vae" || name == "text_encoder" || (name == "image_encoder" && frozen->image_encoder)))
        continue;
      if (entry.is_directory())
        link_or_copy_tree(entry.path(), tmp / name);
      else
        fs::copy_file(entry.path(), tmp / name);
    }
    if (model.random_frozen) {
      for (const char* part : {"vae", "text_encoder"}) {
        fs::create_directories(tmp / part);
        fs::copy_file(source / part / "config.json", tmp / part / "config.json");
      }
      save_safetensors(tmp / "vae" / "diffusion_pytorch_model.safetensors", named_weights(*frozen->vae));
      save_safetensors(tmp / "text_encoder" / "model.safetensors", named_weights(*frozen->text_encoder));
      if (frozen->image_encoder) {
        fs::create_directories(tmp / "image_encoder");
        fs::copy_file(source / "image_encoder" / "config.json", tmp / "image_encoder" / "config.json");
        save_safetensors(tmp / "image_encoder" / "model.safetensors", named_weights(*frozen->image_encoder));
      }
    }
    fs::create_directories(tmp / "transformer");
    fs::copy_file(source / "transformer" / "config.json", tmp / "transformer" / "config.json");
    save_safetensors(tmp / "transformer" / "diffusion_pytorch_model.safetensors", transformer);
    if (!ema.empty()) {
      fs::create_directories(tmp / "transformer_ema");
      fs::copy_file(source / "transformer" / "config.json", tmp / "transformer_ema" / "config.json");
      save_safetensors(tmp / "transformer_ema" / "diffusion_pytorch_model.safetensors", ema);
    }
  });
}

void export_wan_training_checkpoint(const fs::path& dir, const fs::path& out) {
  const auto loaded = load_whole_training_checkpoint(dir);
  const std::string where = (dir / "trainer_state.json").string();
  MM_CHECK(loaded.state.contains("run_config") && loaded.state["run_config"].is_string(), where,
           ": run_config: missing (the export takes the source pipeline from it)");
  YAML::Node root;
  try {
    root = YAML::Load(loaded.state["run_config"].get<std::string>());
  } catch (const YAML::Exception& e) {
    fail(where, ": run_config: not valid YAML: ", e.what());
  }
  const auto config = parse_video_train_config(root, where + ": run_config");

  // Through the module: the weights are checked by name and shape against the checkpoint's config.
  WanTransformer3DModel transformer(WanTransformerConfig::from_file(dir / "config.json"));
  load_weights(*transformer, loaded.model, dir.string());
  const NamedTensors weights = named_weights(*transformer);
  std::map<std::string, at::Tensor> dtype_of;
  for (const auto& [name, t] : weights) dtype_of[name] = t;
  NamedTensors ema;
  for (const auto& [name, t] : loaded.optimizer) {
    if (name.rfind("ema.", 0) != 0) continue;
    const auto weight = name.substr(4);
    const auto it = dtype_of.find(weight);
    MM_CHECK(it != dtype_of.end() && it->second.sizes() == t.sizes(), where, ": EMA tensor ", name,
             " matches no transformer weight of that shape");
    ema.emplace_back(weight, t.to(it->second.scalar_type()));
  }
  std::unique_ptr<WanModel> frozen;
  if (config.model.random_frozen) {
    WanLoadOptions load;
    load.text_encoder = load.vae = load.transformer = load.image_encoder = false;
    frozen = WanModel::from_pretrained(config.model.path, load);
    init_frozen_parts_randomly(*frozen, config.model.init_seed + 1);
  }
  write_wan_training_export(config.model, frozen.get(), weights, ema, out);
}

}  // namespace mm
