// `mmtrain launch`: starts the worker processes of one node of a multi-process job and
// supervises them, as torchrun does for Python. Each worker gets the torchrun environment
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT) that
// DistEnv::from_env reads. One failed worker would otherwise leave its peers blocked in a
// collective forever, so the first failure (non-zero exit or a signal) stops all the others:
// SIGTERM, then SIGKILL after a grace period. Ctrl-C or SIGTERM to the launcher stop them the
// same way. Every worker is reaped before launch() returns or throws.
#pragma once
#include <string>
#include <vector>

namespace mm::dist {

struct LaunchOptions {
  int nproc_per_node = 1;  // workers on this node
  int nnodes = 1;
  int node_rank = 0;  // this node's index in 0..nnodes-1
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int stop_timeout_s = 30;  // grace period between SIGTERM and SIGKILL when stopping workers
  std::string program;      // executable each worker runs; empty: this mmtrain binary
  std::vector<std::string> args;  // the worker's arguments (argv[1:])
};

// Throws mm::Error naming the offending option (a count below 1, a node rank outside
// 0..nnodes-1, a port outside 1..65535, no arguments for mmtrain, a program that is not an
// executable file).
void validate(const LaunchOptions& options);

// The environment of worker `local_rank`: `inherited` (KEY=VALUE strings) without any earlier
// values of the torchrun variables, followed by this worker's values of them.
std::vector<std::string> worker_environment(const LaunchOptions& options, int local_rank,
                                            const std::vector<std::string>& inherited);

// Validates, runs the workers and returns once all of them exited with status 0. Throws
// mm::Error naming the first failed rank and its exit status or signal, or the signal that
// interrupted the launcher, after all workers have been stopped and reaped.
void launch(const LaunchOptions& options);

}  // namespace mm::dist
