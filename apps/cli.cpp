// The mmtrain command line: every subcommand, parsing and the one-line errors ("mmtrain: error:
// ...", exit 1; a usage error exits 2). mmtrain.cpp's main calls it, and so does the tests'
// fault-injection harness (tests/harness/).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"
#include "mm/core/device.h"
#include "mm/core/error.h"
#include "mm/core/log.h"
#include "mm/dist/process_group.h"

namespace mm::cli {

at::ScalarType dtype_option(const std::string& name) {
  if (name == "fp32" || name == "float32") return at::kFloat;
  if (name == "bf16" || name == "bfloat16") return at::kBFloat16;
  fail("--dtype '", name, "' is not supported (fp32 or bf16)");
}

int run(int argc, char** argv) {
  // Before anything initialises CUDA (the allocator reads its settings once).
  use_expandable_segments_by_default();
  CLI::App app{
      "mmtrain: multimodal training, inference and evaluation on libtorch.\n"
      "Models are Hugging Face directories (config.json, safetensors, tokenizer files).",
      "mmtrain"};
  app.require_subcommand(1);
  // Options of the app (--log-level) are accepted after the subcommand too.
  app.fallthrough();
  app.set_version_flag("--version", version_string());
  // The rank as the job will see it (torchrun's variables, or Slurm's under srun): log lines carry
  // it, and ranks > 0 stay quiet below warnings. A malformed environment is reported by the
  // command that joins the job.
  try {
    const auto env = dist::DistEnv::from_env();
    if (env.distributed()) log::set_rank(static_cast<int>(env.rank), static_cast<int>(env.world_size));
  } catch (const std::exception&) {
  }
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug, info, warn or error (messages go to stderr)")
      ->capture_default_str()
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}))
      ->each([](const std::string& level) { log::set_level(log::level_from_string(level)); });
  app.set_help_all_flag("--help-all", "Print help for every subcommand");
  add_train_command(app);
  add_infer_command(app);
  add_eval_command(app);
  add_data_command(app);
  add_export_command(app);
  add_convert_command(app);
  std::vector<std::string> args(argv + 1, argv + argc);
  add_launch_command(app, take_launch_worker_args(args));
  add_extract_command(app);
  add_models_command(app);
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

}  // namespace mm::cli
