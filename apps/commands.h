// Each subcommand registers its options and its action on the CLI11 app.
#pragma once
#include <CLI/CLI.hpp>

namespace mm::cli {

void add_train_command(CLI::App& app);
void add_infer_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_data_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_convert_command(CLI::App& app);
void add_launch_command(CLI::App& app);
void add_extract_command(CLI::App& app);
// `infer t2v`, a subcommand of `infer`.
void add_video_infer_commands(CLI::App& infer);

}  // namespace mm::cli
