// Joining a multi-process job: the torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, as torchrun, Slurm wrappers and `mmtrain launch`
// set it), the rendezvous through c10d's TCPStore (rank 0 hosts it) and the Gloo process group
// that carries CPU tensors. Every byte goes through c10d; nothing here opens a socket itself.
#pragma once
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

namespace mm::dist {

struct DistEnv {
  int64_t rank = 0, world_size = 1;
  int64_t local_rank = 0, local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int64_t master_port = 29500;

  bool distributed() const { return world_size > 1; }

  // Reads the variables; absent ones keep the single-process defaults above. Without RANK but
  // inside a Slurm task (SLURM_PROCID), Slurm's SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and
  // SLURM_NTASKS_PER_NODE (or SLURM_TASKS_PER_NODE) give the ranks; MASTER_ADDR / MASTER_PORT
  // still come from the job script. Throws mm::Error naming the variable when one is not an
  // integer or is out of range (RANK >= WORLD_SIZE, a port outside 1..65535, ...).
  static DistEnv from_env();
};

struct RendezvousOptions {
  // How long rank 0 waits for the others to join, the others wait for rank 0's store, and any
  // collective waits for its peers.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

// A joined job: the shared store every group of this job is built through.
struct Rendezvous {
  DistEnv env;
  RendezvousOptions options;
  c10::intrusive_ptr<c10d::Store> store;
};

// Connects to (rank 0: hosts) the TCPStore at MASTER_ADDR:MASTER_PORT and waits for all ranks.
// Throws mm::Error naming MASTER_ADDR:MASTER_PORT when the store cannot be hosted (port in use)
// or reached in time.
Rendezvous rendezvous(const DistEnv& env, const RendezvousOptions& options = {});

// A Gloo group over `ranks` (global ranks, ascending; this rank must be one of them). Only the
// members call it; `tag` must be the same on all of them and unique among the job's groups.
c10::intrusive_ptr<c10d::Backend> new_gloo_group(const Rendezvous& job, const std::vector<int64_t>& ranks,
                                                 const std::string& tag);

// Rendezvous and a Gloo process group over all ranks of `env`.
c10::intrusive_ptr<c10d::Backend> init_gloo_group(const DistEnv& env, const RendezvousOptions& options = {});

// Whether this build has Gloo (the gloo headers were found at configure time).
bool gloo_available();

// An exception's message for a user: c10's errors carry a C++ backtrace in what(), dropped here.
std::string message_of(const std::exception& e);

}  // namespace mm::dist
