// `mmtrain train CFG.yaml [--set key=value ...]`: fine-tune or pretrain from a run config.
#include <torch/torch.h>

#include <iostream>

#include "commands.h"
#include "mm/core/log.h"
#include "mm/core/log_state.h"
#include "mm/core/run_config.h"
#include "mm/tasks/model_registry.h"

namespace mm::cli {

void add_train_command(CLI::App& app) {
  struct Options {
    std::string config;
    std::vector<std::string> overrides;
  };
  auto options = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "train",
      "Train a model from a YAML run config: vision-language (model, data, train, freeze, lora, optim, schedule, "
      "output, eval, parallel; see examples/qwen2.5vl/README.md) or, with task: text_to_video, a Wan DiT (see "
      "examples/wan/README.md). Resumes from the latest checkpoint in output.dir.");
  cmd->add_option("config", options->config, "run config (YAML)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--set", options->overrides, "override a config key, e.g. --set optim.lr=1e-4 (repeatable)")
      ->check(key_value_validator());
  cmd->callback([options] {
    const auto root = load_run_config(options->config, options->overrides);
    const auto summary = model_spec_of_run_config(root, options->config).train(root, options->config);
    if (log::rank() != 0) return;  // one summary for the whole job, from rank 0
    if (summary.already_finished) {
      std::cout << "nothing to do: the run in " << summary.final_model.parent_path().string() << " already finished its "
                << summary.steps << " steps (use another output.dir, or raise train.max_steps to continue it)\n"
                << "model: " << summary.final_model.string() << "\n";
      return;
    }
    std::cout << "trained " << summary.steps << " steps, final loss " << summary.final_loss << "\n"
              << "model: " << summary.final_model.string() << "\n";
    if (summary.eval_accuracy >= 0) std::cout << "eval exact match: " << summary.eval_accuracy << "\n";
  });
}

}  // namespace mm::cli
