// mmtrain: the one binary. Subcommands share option names; bad input prints one line
// ("mmtrain: error: ...") and exits 1, a usage error 2.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"
#include "mm/core/log.h"
#include "mm/dist/process_group.h"

int main(int argc, char** argv) {
  CLI::App app{
      "mmtrain: multimodal training, inference and evaluation on libtorch.\n"
      "Models are Hugging Face directories (config.json, safetensors, tokenizer files).",
      "mmtrain"};
  app.require_subcommand(1);
  // Options of the app (--log-level) are accepted after the subcommand too.
  app.fallthrough();
  app.set_version_flag("--version", mm::cli::version_string());
  // The rank as the job will see it (torchrun's variables, or Slurm's under srun): log lines carry
  // it, and ranks > 0 stay quiet below warnings. A malformed environment is reported by the
  // command that joins the job.
  try {
    const auto env = mm::dist::DistEnv::from_env();
    if (env.distributed()) mm::log::set_rank(static_cast<int>(env.rank), static_cast<int>(env.world_size));
  } catch (const std::exception&) {
  }
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug, info, warn or error (messages go to stderr)")
      ->capture_default_str()
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}))
      ->each([](const std::string& level) { mm::log::set_level(mm::log::level_from_string(level)); });
  app.set_help_all_flag("--help-all", "Print help for every subcommand");
  mm::cli::add_train_command(app);
  mm::cli::add_infer_command(app);
  mm::cli::add_eval_command(app);
  mm::cli::add_data_command(app);
  mm::cli::add_export_command(app);
  mm::cli::add_convert_command(app);
  std::vector<std::string> args(argv + 1, argv + argc);
  mm::cli::add_launch_command(app, mm::cli::take_launch_worker_args(args));
  mm::cli::add_extract_command(app);
  mm::cli::add_models_command(app);
  try {
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first
    app.parse(args);
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
