// `mmtrain launch --nproc-per-node N [...] -- ARGS...`: runs N workers of a multi-process job on
// this node (each `mmtrain ARGS...`, or `--program PATH ARGS...`) with the torchrun environment,
// and stops them all when one fails or the launcher is interrupted.
#include "commands.h"
#include "mm/dist/launcher.h"

namespace mm::cli {

void add_launch_command(CLI::App& app) {
  auto options = std::make_shared<dist::LaunchOptions>();
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
  cmd->add_option("args", options->args, "the workers' arguments, after --");
  cmd->callback([options] { dist::launch(*options); });
}

}  // namespace mm::cli
