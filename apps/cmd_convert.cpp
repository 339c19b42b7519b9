// `mmtrain convert --from SRC --to OUT [--slices N]`: a training checkpoint of any layout to a
// Hugging Face model directory (no --slices) or to a sharded training checkpoint of N slices; a
// Hugging Face model directory to a sharded training checkpoint (--slices N).
#include <torch/torch.h>

#include <iostream>

#include "commands.h"
#include "mm/tasks/checkpoint_commands.h"

namespace mm::cli {

void add_convert_command(CLI::App& app) {
  auto options = std::make_shared<ConvertOptions>();
  auto* cmd = app.add_subcommand(
      "convert",
      "Convert checkpoints: a training checkpoint (one process or sharded by any number of ranks) to a Hugging "
      "Face model directory, or to a sharded checkpoint of N slices (--slices N); a Hugging Face model directory "
      "to a sharded training checkpoint at step 0");
  cmd->add_option("--from", options->from,
                  "a training checkpoint (step-N dir, its checkpoints/ folder or the run's output dir) or a Hugging "
                  "Face model directory")
      ->required();
  cmd->add_option("--to", options->to, "output directory (must not exist or be empty)")->required();
  cmd->add_option("--slices", options->slices,
                  "0: write a Hugging Face model directory; N: a sharded training checkpoint cut into N slices")
      ->capture_default_str();
  cmd->callback([options] {
    const auto from = convert_checkpoint(*options);
    std::cout << "converted " << from.string() << " to " << options->to.string() << "\n";
  });
}

}  // namespace mm::cli
