// `mmtrain extract CFG.yaml --out DIR`: precompute the VAE latents and prompt embeddings of a
// text-to-video run config's data, for training with features.dir: DIR.
#include <torch/torch.h>

#include <iostream>

#include "commands.h"
#include "mm/core/device.h"
#include "mm/core/error.h"
#include "mm/core/run_config.h"
#include "mm/tasks/model_registry.h"

namespace mm::cli {

void add_extract_command(CLI::App& app) {
  struct Options {
    std::string config;
    std::vector<std::string> overrides;
    ExtractOptions extract;
    int threads = 0;
    std::string device = "auto";
  };
  auto options = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "extract",
      "Precompute VAE latents and text embeddings of a text-to-video run config's data (model and data "
      "sections) into safetensors shards; resumable. Train on them with features.dir.");
  cmd->add_option("config", options->config, "run config (YAML, task: text_to_video)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--out", options->extract.out, "Output directory (an interrupted extraction there resumes)")->required();
  cmd->add_option("--set", options->overrides, "override a config key, e.g. --set data.fps=8 (repeatable)")
      ->check(key_value_validator());
  cmd->add_option("--shard-size", options->extract.shard_size, "Samples per shard file")->capture_default_str();
  cmd->add_option("--threads", options->threads, "CPU threads (0 = libtorch's default)")->capture_default_str();
  cmd->add_option("--device", options->device, "Where the VAE and the text encoder run: auto (a GPU when there is one), cpu, cuda or cuda:N")
      ->capture_default_str();
  cmd->callback([options] {
    if (options->threads > 0) torch::set_num_threads(options->threads);
    options->extract.device = resolve_device(options->device, "--device");
    const auto root = load_run_config(options->config, options->overrides);
    const ModelSpec& spec = model_spec_of_run_config(root, options->config);
    MM_CHECK(spec.extract, options->config, ": task: ", spec.train_task, " (", spec.family,
             ") has no features to extract; extract is for tasks that train on precomputed features");
    const auto summary = spec.extract(root, options->config, options->extract);
    std::cout << "extracted " << summary.samples << " samples into " << options->extract.out.string();
    if (summary.skipped > 0) std::cout << " (" << summary.skipped << " clips skipped)";
    std::cout << "\n";
  });
}

}  // namespace mm::cli
