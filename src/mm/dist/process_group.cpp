#include "mm/dist/process_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif

#include <algorithm>
#include <cstdlib>

#include "mm/core/error.h"

namespace mm::dist {
namespace {

// The integer value of environment variable `name`, or `fallback` when it is unset or empty.
int64_t env_int(const char* name, int64_t fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  const long long parsed = std::strtoll(value, &end, 10);
  MM_CHECK(end != value && *end == '\0', "environment variable ", name, "='", value, "' is not an integer");
  return parsed;
}

// Slurm's own variables, for `srun mmtrain train ...` with one task per rank and no launcher in
// between (torchrun's variables win when both are set).
void read_slurm(DistEnv& env) {
  env.world_size = env_int("SLURM_NTASKS", 1);
  env.rank = env_int("SLURM_PROCID", 0);
  env.local_rank = env_int("SLURM_LOCALID", 0);
  // SLURM_NTASKS_PER_NODE is set with --ntasks-per-node; SLURM_TASKS_PER_NODE always ("4(x2)").
  env.local_world_size = env_int("SLURM_NTASKS_PER_NODE", 0);
  if (env.local_world_size == 0) {
    const char* tasks = std::getenv("SLURM_TASKS_PER_NODE");
    env.local_world_size = tasks ? std::atoll(tasks) : env.world_size;
  }
  const char* master = std::getenv("MASTER_ADDR");
  MM_CHECK(env_int("SLURM_NNODES", 1) == 1 || (master != nullptr && *master != '\0'),
           "a multi-node Slurm job needs MASTER_ADDR (e.g. export MASTER_ADDR=$(scontrol show hostnames "
           "\"$SLURM_JOB_NODELIST\" | head -n 1)) and the same MASTER_PORT in every task");
}

}  // namespace

DistEnv DistEnv::from_env() {
  DistEnv env;
  const char* rank = std::getenv("RANK");
  const char* slurm_rank = std::getenv("SLURM_PROCID");
  if ((rank == nullptr || *rank == '\0') && slurm_rank != nullptr && *slurm_rank != '\0') {
    read_slurm(env);
  } else {
    env.world_size = env_int("WORLD_SIZE", 1);
    env.rank = env_int("RANK", 0);
    env.local_world_size = env_int("LOCAL_WORLD_SIZE", env.world_size);
    env.local_rank = env_int("LOCAL_RANK", env.rank);
  }
  env.master_port = env_int("MASTER_PORT", env.master_port);
  if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr && *addr != '\0') env.master_addr = addr;
  MM_CHECK(env.world_size >= 1, "WORLD_SIZE=", env.world_size, " must be at least 1");
  MM_CHECK(env.rank >= 0 && env.rank < env.world_size, "RANK=", env.rank, " must be in [0, WORLD_SIZE=",
           env.world_size, ")");
  MM_CHECK(env.local_world_size >= 1 && env.local_world_size <= env.world_size, "LOCAL_WORLD_SIZE=",
           env.local_world_size, " must be in [1, WORLD_SIZE=", env.world_size, "]");
  MM_CHECK(env.local_rank >= 0 && env.local_rank < env.local_world_size, "LOCAL_RANK=", env.local_rank,
           " must be in [0, LOCAL_WORLD_SIZE=", env.local_world_size, ")");
  MM_CHECK(env.master_port >= 1 && env.master_port <= 65535, "MASTER_PORT=", env.master_port,
           " must be in [1, 65535]");
  return env;
}

std::string message_of(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

bool gloo_available() {
#ifdef USE_C10D_GLOO
  return true;
#else
  return false;
#endif
}

Rendezvous rendezvous(const DistEnv& env, const RendezvousOptions& options) {
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(env.master_port);
  store_options.isServer = env.rank == 0;
  store_options.numWorkers = static_cast<size_t>(env.world_size);
  store_options.waitWorkers = true;
  store_options.timeout = options.timeout;
  try {
    return Rendezvous{env, options, c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_options)};
  } catch (const std::exception& e) {
    fail("rendezvous at MASTER_ADDR:MASTER_PORT=", where, " failed for rank ", env.rank, " of ", env.world_size,
         env.rank == 0 ? " (hosting the store: is the port in use, or did other ranks not join in time?)"
                       : " (is rank 0 running and the address reachable?)",
         ": ", message_of(e));
  }
}

c10::intrusive_ptr<c10d::Backend> new_gloo_group(const Rendezvous& job, const std::vector<int64_t>& ranks,
                                                 const std::string& tag) {
  const auto me = std::find(ranks.begin(), ranks.end(), job.env.rank);
  MM_CHECK(me != ranks.end(), "process group ", tag, ": rank ", job.env.rank, " is not a member");
  const int group_rank = static_cast<int>(me - ranks.begin());
#ifdef USE_C10D_GLOO
  auto gloo_options = c10d::ProcessGroupGloo::Options::create();
  gloo_options->timeout = job.options.timeout;
  // Loopback when every rank is on this machine; otherwise the interface that reaches the host.
  gloo_options->devices.push_back(job.env.local_world_size == job.env.world_size
                                      ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                      : c10d::ProcessGroupGloo::createDefaultDevice());
  auto store = c10::make_intrusive<c10d::PrefixStore>("mm/" + tag + "/", job.store);
  try {
    return c10::make_intrusive<c10d::ProcessGroupGloo>(store, group_rank, static_cast<int>(ranks.size()),
                                                       gloo_options);
  } catch (const std::exception& e) {
    fail("creating the Gloo process group ", tag, " (rank ", job.env.rank, " of ", job.env.world_size, ", store ",
         job.env.master_addr, ":", job.env.master_port, ") failed: ", message_of(e));
  }
#else
  (void)group_rank;
  fail("this mmtrain was built without Gloo (the gloo headers, Debian's libgloo-dev, were not found at "
       "configure time), so it cannot join a job of WORLD_SIZE=", job.env.world_size);
#endif
}

c10::intrusive_ptr<c10d::Backend> init_gloo_group(const DistEnv& env, const RendezvousOptions& options) {
  std::vector<int64_t> all(static_cast<size_t>(env.world_size));
  for (int64_t r = 0; r < env.world_size; ++r) all[static_cast<size_t>(r)] = r;
  return new_gloo_group(rendezvous(env, options), all, "world");
}

}  // namespace mm::dist
