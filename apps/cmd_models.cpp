// `mmtrain models`: the model families this build supports, with the config key that selects each
// and what the commands can do with it; `mmtrain --version`.
#include <torch/version.h>

#include <iostream>

#include "commands.h"
#include "mm_version.h"

namespace mm::cli {

namespace {

struct SupportedModel {
  const char* family;
  const char* selected_by;  // the key in the model directory that names it
  const char* commands;
};

// Until the model registry lands, this table is kept by hand beside the loaders it names.
constexpr SupportedModel kModels[] = {
    {"Qwen2.5-VL", "config.json model_type: qwen2_5_vl",
     "infer, eval, train (full, frozen parts, LoRA; DP/FSDP/HSDP), export, convert"},
    {"Wan2.1 / Wan2.2 text-to-video", "model_index.json _class_name: WanPipeline",
     "infer t2v, train (task: text_to_video), extract, export and convert (of its training checkpoints)"},
    {"Wan2.1 / Wan2.2 image-to-video", "model_index.json _class_name: WanImageToVideoPipeline",
     "infer t2v --image [--last-image]"},
};

}  // namespace

std::string version_string() {
  return std::string("mmtrain ") + MM_VERSION + " (libtorch " + std::to_string(TORCH_VERSION_MAJOR) + "." +
         std::to_string(TORCH_VERSION_MINOR) + "." + std::to_string(TORCH_VERSION_PATCH) + ")";
}

void add_models_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("models", "List the model families this build supports and how each is recognised");
  cmd->callback([] {
    for (const auto& m : kModels) std::cout << m.family << "\n  recognised by: " << m.selected_by << "\n  commands: " << m.commands << "\n";
  });
}

}  // namespace mm::cli
