// `mmtrain models`: the model families this build supports, with the config key that selects each
// and what the commands can do with it (from the model registry); `mmtrain --version`.
#include <torch/cuda.h>
#include <torch/version.h>

#include <iostream>

#include "commands.h"
#include "mm/dist/nccl_group.h"
#include "mm/nn/attention_backend.h"
#include "mm/nn/varlen_attention.h"
#include "mm/tasks/model_registry.h"
#include "mm_version.h"

namespace mm::cli {

std::string version_string() {
  std::string cuda = "CPU-only libtorch";
  size_t gpus = 0;
#ifdef MM_TORCH_CUDA
  gpus = torch::cuda::is_available() ? torch::cuda::device_count() : 0;
  cuda = gpus == 0 ? "CUDA built in, no GPU visible" : "CUDA built in, " + std::to_string(gpus) + " GPU(s) visible";
#endif
  // The attention kernel on the device `auto` would pick (the first GPU, else the CPU).
  const c10::Device device = gpus > 0 ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  return std::string("mmtrain ") + MM_VERSION + " (libtorch " + std::to_string(TORCH_VERSION_MAJOR) + "." +
         std::to_string(TORCH_VERSION_MINOR) + "." + std::to_string(TORCH_VERSION_PATCH) + "; " + cuda +
         "; attention: " + sdpa_backend(device) + ", packed: " + varlen_backend(device) + " on " + device.str() +
         "; NCCL: " + (dist::nccl_available() ? "built in" : "not built") + ")";
}

void add_models_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("models", "List the model families this build supports and how each is recognised");
  cmd->callback([] {
    for (const auto& spec : model_registry()) {
      std::cout << spec.family << " (" << spec.name << ", " << to_string(spec.kind) << ")\n  recognised by: "
                << spec.key.describe() << "\n";
      if (!spec.checkpoint_key.value.empty() && spec.checkpoint_key.file + spec.checkpoint_key.field !=
                                                    spec.key.file + spec.key.field)
        std::cout << "  its training checkpoints by: " << spec.checkpoint_key.describe() << "\n";
      std::cout << "  commands: " << spec.commands() << "\n";
    }
  });
}

}  // namespace mm::cli
