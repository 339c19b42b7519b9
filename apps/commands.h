// Each subcommand registers its options and its action on the CLI11 app.
#pragma once
#include <CLI/CLI.hpp>

namespace mm::cli {

void add_infer_command(CLI::App& app);

}  // namespace mm::cli
