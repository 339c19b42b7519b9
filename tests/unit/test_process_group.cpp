// The process-group layer: the torchrun environment is read and checked, ranks rendezvous
// through TCPStore and Gloo's collectives give the right results across real processes (this
// binary re-executed as each rank), and a missing master or a taken port ends in a clear error
// within the timeout instead of a hang.
#include <chrono>
#include <iostream>
#include <thread>

#include "mm/dist/nccl_group.h"
#include "mm/dist/process_group.h"
#include "mm/parallel/device_mesh.h"
#include "rank_processes.h"
#include "testing.h"

namespace mm {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// ---- worker side: this binary started with MM_TEST_PG_WORKER=1 is one rank ---------------------

// Runs every collective the distributed engine uses and checks its result; the exit status says
// whether all were right (messages on stderr).
int run_worker() {
  const auto env = dist::DistEnv::from_env();
  dist::RendezvousOptions options;
  options.timeout = 30s;
  auto group = dist::init_gloo_group(env, options);
  const int64_t r = env.rank, n = env.world_size;
  int failures = 0;
  auto check = [&](bool ok, const std::string& what) {
    if (!ok) {
      std::cerr << "rank " << r << ": " << what << " gave a wrong result\n";
      ++failures;
    }
  };

  std::vector<at::Tensor> sum = {torch::full({5}, static_cast<double>(r + 1))};
  group->allreduce(sum)->wait();
  check(torch::equal(sum[0], torch::full({5}, static_cast<double>(n * (n + 1) / 2))), "allreduce");

  // Uneven values per rank: rank k contributes [k*10, k*10+1].
  auto gathered = torch::empty({2 * n});
  auto mine = torch::arange(2, torch::kFloat) + 10.0 * static_cast<double>(r);
  group->_allgather_base(gathered, mine)->wait();
  check(torch::equal(gathered, (torch::arange(n, torch::kFloat) * 10).repeat_interleave(2) +
                                   torch::arange(2, torch::kFloat).repeat({n})),
        "_allgather_base");

  // Each rank gives [0, 1, ..., 2n) * (rank + 1); rank k gets the sum of its 2-element slice.
  auto full = torch::arange(2 * n, torch::kFloat) * static_cast<double>(r + 1);
  auto slice = torch::empty({2});
  group->_reduce_scatter_base(slice, full)->wait();
  check(torch::equal(slice, torch::arange(2 * r, 2 * r + 2, torch::kFloat) * static_cast<double>(n * (n + 1) / 2)),
        "_reduce_scatter_base");

  std::vector<at::Tensor> from_root = {torch::full({3}, static_cast<double>(100 + r))};
  group->broadcast(from_root)->wait();
  check(torch::equal(from_root[0], torch::full({3}, 100.0)), "broadcast");

  group->barrier()->wait();
  return failures == 0 ? 0 : 3;
}

// Worker mode is decided before gtest starts, so the worker is not a test of its own.
const int kWorkerStatus = testing::run_as_worker_if("MM_TEST_PG_WORKER", run_worker);

// ---- parent side -------------------------------------------------------------------------------

void expect_collectives_right(int world) {
  ASSERT_TRUE(dist::gloo_available()) << "built without Gloo (install libgloo-dev and reconfigure)";
  testing::expect_ranks_succeed(world, "MM_TEST_PG_WORKER");
}

TEST(ProcessGroup, TwoRanksGetRightCollectives) { expect_collectives_right(2); }

TEST(ProcessGroup, ThreeRanksGetRightCollectives) { expect_collectives_right(3); }

// NCCL is compiled into every build made against a CUDA torch (the wheel we pin is one); on a
// GPU machine `./mm gpu-check` runs its collectives (nccl.world_of_one).
TEST(NcclGroup, IsBuiltAgainstACudaTorch) {
#ifdef MM_TORCH_CUDA
  EXPECT_TRUE(dist::nccl_available()) << "the CUDA and NCCL headers were not found at configure time";
#else
  GTEST_SKIP() << "built against a CPU torch: no NCCL to build";
#endif
}

// A job that asks for NCCL on a machine without a GPU ends at once with an error that says so,
// before any collective could hang. Its GPU twin is gpu_check's nccl.world_of_one.
TEST(NcclGroup, WithoutAGpuIsAClearError) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is visible: gpu_check's nccl.world_of_one runs there";
  dist::DistEnv env;
  env.master_port = testing::free_port();
  dist::RendezvousOptions options;
  options.timeout = 10s;
  const auto job = dist::rendezvous(env, options);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW_MSG(dist::new_nccl_world(job, c10::Device(c10::kCUDA, 0)), "has no cuda:0");
  EXPECT_THROW_MSG(dist::new_nccl_world(job, c10::Device(c10::kCPU)), "needs a CUDA device");
  // A mesh of one process makes no groups at all, on any device.
  EXPECT_NO_THROW(parallel::DeviceMesh(job, {{parallel::MeshDim::dp_shard, 1}}, c10::Device(c10::kCUDA, 0)));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

// Sets the torchrun variables for the scope of a test, restoring them after.
class ScopedEnv {
 public:
  explicit ScopedEnv(std::vector<std::pair<std::string, std::string>> vars) {
    for (auto& [k, v] : vars) {
      const char* old = std::getenv(k.c_str());
      saved_.emplace_back(k, old ? std::optional<std::string>(old) : std::nullopt);
      ::setenv(k.c_str(), v.c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (auto& [k, v] : saved_) v ? ::setenv(k.c_str(), v->c_str(), 1) : ::unsetenv(k.c_str());
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(DistEnv, DefaultsToOneProcess) {
  ScopedEnv env({{"RANK", ""}, {"WORLD_SIZE", ""}, {"LOCAL_RANK", ""}, {"LOCAL_WORLD_SIZE", ""}, {"MASTER_PORT", ""}});
  const auto d = dist::DistEnv::from_env();
  EXPECT_EQ(d.rank, 0);
  EXPECT_EQ(d.world_size, 1);
  EXPECT_FALSE(d.distributed());
}

TEST(DistEnv, ReadsTorchrunVariables) {
  ScopedEnv env({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
                 {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29400"}});
  const auto d = dist::DistEnv::from_env();
  EXPECT_EQ(d.rank, 5);
  EXPECT_EQ(d.world_size, 8);
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.local_world_size, 4);
  EXPECT_EQ(d.master_addr, "node0");
  EXPECT_EQ(d.master_port, 29400);
  EXPECT_TRUE(d.distributed());
}

TEST(DistEnv, BadVariablesAreNamed) {
  {
    ScopedEnv env({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "1"}});
    EXPECT_THROW_MSG(dist::DistEnv::from_env(), "RANK=2 must be in [0, WORLD_SIZE=2)");
  }
  {
    ScopedEnv env({{"RANK", "one"}, {"WORLD_SIZE", "2"}});
    EXPECT_THROW_MSG(dist::DistEnv::from_env(), "RANK='one' is not an integer");
  }
  {
    ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"},
                   {"MASTER_PORT", "70000"}});
    EXPECT_THROW_MSG(dist::DistEnv::from_env(), "MASTER_PORT=70000 must be in [1, 65535]");
  }
}

TEST(DistEnv, ReadsSlurmTasksWithoutTorchrunVariables) {
  ScopedEnv env({{"RANK", ""}, {"WORLD_SIZE", ""}, {"LOCAL_RANK", ""}, {"LOCAL_WORLD_SIZE", ""},
                 {"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS_PER_NODE", ""},
                 {"SLURM_TASKS_PER_NODE", "4(x2)"}, {"SLURM_NNODES", "2"}, {"MASTER_ADDR", "node0"},
                 {"MASTER_PORT", "29400"}});
  const auto d = dist::DistEnv::from_env();
  EXPECT_EQ(d.rank, 5);
  EXPECT_EQ(d.world_size, 8);
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.local_world_size, 4);
  EXPECT_EQ(d.master_addr, "node0");
  {
    ScopedEnv torchrun({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "4"}});
    EXPECT_EQ(dist::DistEnv::from_env().rank, 2) << "torchrun's variables win over Slurm's";
  }
  ScopedEnv no_master(std::vector<std::pair<std::string, std::string>>{{"MASTER_ADDR", ""}});
  EXPECT_THROW_MSG(dist::DistEnv::from_env(), "a multi-node Slurm job needs MASTER_ADDR");
}

TEST(ProcessGroup, UnreachableMasterIsAClearErrorWithinTheTimeout) {
  dist::DistEnv env;
  env.rank = 1;
  env.world_size = 2;
  env.local_world_size = 2;
  env.local_rank = 1;
  env.master_port = testing::free_port();  // nobody hosts a store there
  dist::RendezvousOptions options;
  options.timeout = 2s;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW_MSG(dist::init_gloo_group(env, options),
                   "rendezvous at MASTER_ADDR:MASTER_PORT=127.0.0.1:" + std::to_string(env.master_port));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
}

TEST(ProcessGroup, PortInUseIsAClearError) {
  // Someone else listens on the port rank 0 should host the store on.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  dist::DistEnv env;
  env.world_size = 2;
  env.local_world_size = 2;
  env.master_port = ntohs(addr.sin_port);
  dist::RendezvousOptions options;
  options.timeout = 2s;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW_MSG(dist::init_gloo_group(env, options), "is the port in use");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
  ::close(fd);
}

}  // namespace
}  // namespace mm
