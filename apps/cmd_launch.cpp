// `mmtrain launch --nproc-per-node N [...] -- ARGS...`: runs N workers of a multi-process job on
// this node (each `mmtrain ARGS...`, or `--program PATH ARGS...`) with the torchrun environment,
// and stops them all when one fails or the launcher is interrupted.
#include <algorithm>

#include "commands.h"
#include "mm/dist/launcher.h"

namespace mm::cli {

std::vector<std::string> take_launch_worker_args(std::vector<std::string>& args) {
  // The subcommand is the first word that is neither an app option nor --log-level's value: a
  // "launch" later on (a prompt, a path) is not this command.
  auto launch = args.begin();
  while (launch != args.end() && (*launch)[0] == '-') launch += (*launch == "--log-level" && launch + 1 != args.end()) ? 2 : 1;
  if (launch == args.end() || *launch != "launch") return {};
  const auto dashes = std::find(launch, args.end(), "--");
  if (dashes == args.end()) return {};
  std::vector<std::string> worker(dashes + 1, args.end());
  args.erase(dashes, args.end());
  return worker;
}

void add_launch_command(CLI::App& app, std::vector<std::string> worker_args) {
  auto options = std::make_shared<dist::LaunchOptions>();
  options->args = std::move(worker_args);
  auto* cmd = app.add_subcommand(
      "launch",
      "Start the worker processes of a multi-process run on this node, as torchrun does: "
      "`mmtrain launch --nproc-per-node 2 -- train run.yaml`. The first worker to fail stops the others.");
  cmd->add_option("--nproc-per-node", options->nproc_per_node, "workers on this node")->required();
  cmd->add_option("--nnodes", options->nnodes, "number of nodes")->capture_default_str();
  cmd->add_option("--node-rank", options->node_rank, "this node's index, 0..nnodes-1")->capture_default_str();
  cmd->add_option("--master-addr", options->master_addr, "address of the node that runs rank 0")
      ->capture_default_str();
  cmd->add_option("--master-port", options->master_port, "rendezvous port on the master node")
      ->capture_default_str();
  cmd->add_option("--stop-timeout", options->stop_timeout_s,
                  "seconds the other workers get to exit after SIGTERM before SIGKILL")
      ->capture_default_str();
  cmd->add_option("--program", options->program,
                  "run this executable instead of mmtrain (looked up in PATH when it has no slash)");
  // Everything from the first word that is not a launch option on (or after `--`) is the
  // workers' command line, its own options included: `launch --nproc-per-node 2 train a.yaml --set
  // k=v` and `launch --nproc-per-node 2 -- train a.yaml --set k=v` mean the same.
  cmd->prefix_command();
  cmd->fallthrough(false);  // the workers' options are theirs, not the app's
  cmd->footer("The workers' command follows the launch options, after an optional --.");
  cmd->callback([options, cmd] {
    const auto before_dashes = cmd->remaining();
    if (!options->args.empty() && !before_dashes.empty())
      throw CLI::ValidationError("launch", "the worker command starts at '" + before_dashes.front() +
                                               "' and again after --: give it once");
    if (options->args.empty()) options->args = before_dashes;
    if (options->args.empty())
      throw CLI::ValidationError("launch", "no worker command: e.g. mmtrain launch --nproc-per-node 2 -- train run.yaml");
    dist::launch(*options);
  });
}

}  // namespace mm::cli
