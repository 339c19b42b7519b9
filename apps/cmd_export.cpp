// `mmtrain export --checkpoint DIR --to-hf OUT`: a training checkpoint in its family's reference
// layout: a Hugging Face model directory (Qwen2.5-VL, LoRA merged) that transformers and
// `mmtrain infer` load, or a diffusers pipeline directory (Wan) for diffusers and `mmtrain infer t2v`.
#include <torch/torch.h>

#include <iostream>

#include "commands.h"
#include "mm/tasks/checkpoint_commands.h"

namespace mm::cli {

void add_export_command(CLI::App& app) {
  struct Options {
    std::string checkpoint, out;
  };
  auto options = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("export", "Write a training checkpoint as a Hugging Face model directory (Qwen2.5-VL) or a diffusers pipeline (Wan)");
  cmd->add_option("--checkpoint", options->checkpoint,
                  "a checkpoint directory (step-N), its checkpoints/ folder or the run's output dir (latest)")
      ->required();
  cmd->add_option("--to-hf", options->out, "output directory (must not exist or be empty)")->required();
  cmd->callback([options] {
    const auto from = export_checkpoint(options->checkpoint, options->out);
    std::cout << "exported " << from.string() << " to " << options->out << "\n";
  });
}

}  // namespace mm::cli
