// mmtrain: the one binary. Subcommands share option names; bad input prints one line
// ("mmtrain: error: ...") and exits 1.
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <iostream>

#include "commands.h"
#include "mm/core/log.h"

int main(int argc, char** argv) {
  CLI::App app{
      "mmtrain: multimodal training, inference and evaluation on libtorch.\n"
      "Models are Hugging Face directories (config.json, safetensors, tokenizer files)."};
  app.require_subcommand(1);
  // torchrun / Slurm set RANK and WORLD_SIZE; logs of rank > 0 stay quiet below warnings.
  const char* rank = std::getenv("RANK");
  const char* world = std::getenv("WORLD_SIZE");
  if (rank && world) mm::log::set_rank(std::atoi(rank), std::atoi(world));
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug, info, warn or error (messages go to stderr)")
      ->capture_default_str()
      ->each([](const std::string& level) { mm::log::set_level(mm::log::level_from_string(level)); });
  app.set_help_all_flag("--help-all", "Print help for every subcommand");
  mm::cli::add_train_command(app);
  mm::cli::add_infer_command(app);
  mm::cli::add_eval_command(app);
  mm::cli::add_data_command(app);
  mm::cli::add_export_command(app);
  mm::cli::add_convert_command(app);
  mm::cli::add_launch_command(app);
  mm::cli::add_extract_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --help-all
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "mmtrain: error: " << e.what() << " (see mmtrain --help)\n";
    return 2;
  } catch (const c10::Error& e) {  // its what() carries a C++ backtrace
    std::cerr << "mmtrain: error: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {  // mm::Error and the rest
    std::cerr << "mmtrain: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
