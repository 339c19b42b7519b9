// `mmtrain extract CFG.yaml --out DIR`: precompute the VAE latents and prompt embeddings of a
// text-to-video run config's data, for training with features.dir: DIR.
#include <torch/torch.h>

#include <iostream>

#include "commands.h"
#include "mm/core/error.h"
#include "mm/core/run_config.h"
#include "mm/data/text_video_dataset.h"
#include "mm/models/wan/wan_pipeline.h"
#include "mm/models/wan/wan_pipeline_random.h"
#include "mm/tasks/feature_extraction.h"
#include "mm/tasks/video_train_config.h"

namespace mm::cli {

void add_extract_command(CLI::App& app) {
  struct Options {
    std::string config;
    std::vector<std::string> overrides;
    ExtractOptions extract;
    int threads = 0;
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
  cmd->callback([options] {
    if (options->threads > 0) torch::set_num_threads(options->threads);
    const auto root = load_run_config(options->config, options->overrides);
    const auto config = parse_video_train_config(root, options->config);
    MM_CHECK(!config.from_features(), options->config, ": features.dir is set: extract reads the data section's clips");
    WanLoadOptions load;
    load.transformer = false;
    load.text_encoder = load.vae = !config.model.random_frozen;
    auto model = WanModel::from_pretrained(config.model.path, load);
    if (config.model.random_frozen) init_frozen_parts_randomly(*model, config.model.init_seed + 1);
    const auto dataset = TextVideoDataset::open(config.data);
    auto extract = options->extract;
    extract.max_sequence_length = config.model.max_sequence_length;
    extract.fail_on_error = config.data.on_error == "fail";
    const auto summary = extract_video_features(*model, dataset, extract);
    std::cout << "extracted " << summary.samples << " samples into " << extract.out.string();
    if (summary.skipped > 0) std::cout << " (" << summary.skipped << " clips skipped)";
    std::cout << "\n";
  });
}

}  // namespace mm::cli
