// Each subcommand registers its options and its action on the CLI11 app.
#pragma once
#include <ATen/core/ScalarType.h>
#include <CLI/CLI.hpp>

#include <string>

namespace mm::cli {

// The whole command line (cli.cpp): returns the process exit status.
int run(int argc, char** argv);

// --set KEY=VALUE: a missing "=" or key is a usage error (exit 2), caught before anything runs.
inline CLI::Validator key_value_validator() {
  return CLI::Validator(
      [](std::string& value) {
        const auto eq = value.find('=');
        return eq == std::string::npos || eq == 0 ? "expected KEY=VALUE (e.g. optim.lr=1e-4), got '" + value + "'"
                                                  : std::string();
      },
      "KEY=VALUE");
}

// --dtype: fp32 (float32) or bf16 (bfloat16), the weights' and the computation's; another name
// is an error naming the option.
at::ScalarType dtype_option(const std::string& name);

void add_train_command(CLI::App& app);
void add_infer_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_data_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_convert_command(CLI::App& app);
// `worker_args`: what followed `launch ... --` on the command line (take_launch_worker_args).
void add_launch_command(CLI::App& app, std::vector<std::string> worker_args);
// Removes `-- ARGS...` after a `launch` from `args` and returns ARGS: CLI11 would otherwise parse
// them as the app's own.
std::vector<std::string> take_launch_worker_args(std::vector<std::string>& args);
void add_extract_command(CLI::App& app);
void add_models_command(CLI::App& app);
// "mmtrain 0.1.0 (libtorch 2.14.1; CUDA built in, 1 GPU(s) visible; attention: flash_attention on cuda:0)"
std::string version_string();
// `infer t2v`, a subcommand of `infer`.
void add_video_infer_commands(CLI::App& infer);

}  // namespace mm::cli
