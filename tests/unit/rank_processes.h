// Multi-process tests: this test binary re-executed as each rank of a job, with the torchrun
// variables set, and waited for with a time limit (what is left then is killed).
#pragma once
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "testing.h"

extern char** environ;

namespace mm::testing {

// Starts this binary as rank `rank` of `world` with the torchrun variables and `worker_var`=1
// set (the variable that puts the binary in worker mode).
inline pid_t spawn_rank(int rank, int world, int port, const std::string& worker_var) {
  const std::vector<std::pair<std::string, std::string>> rank_vars = {
      {worker_var, "1"}, {"RANK", std::to_string(rank)}, {"WORLD_SIZE", std::to_string(world)},
      {"LOCAL_RANK", std::to_string(rank)}, {"LOCAL_WORLD_SIZE", std::to_string(world)},
      {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)}, {"OMP_NUM_THREADS", "1"}};
  std::vector<std::string> vars;
  // The inherited environment minus what is set here (getenv would find an inherited RANK first).
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string var = *e;
    bool replaced = false;
    for (const auto& [k, _] : rank_vars) replaced = replaced || var.rfind(k + "=", 0) == 0;
    if (!replaced) vars.push_back(var);
  }
  for (const auto& [k, v] : rank_vars) vars.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& v : vars) envp.push_back(v.data());
  envp.push_back(nullptr);
  std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  char* argv[] = {exe.data(), nullptr};
  pid_t pid = -1;
  EXPECT_EQ(::posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, envp.data()), 0);
  return pid;
}

// Waits for every pid up to `limit`, killing what is left then; returns the exit statuses
// (-1 for a process that did not exit normally or was killed).
inline std::vector<int> wait_all(const std::vector<pid_t>& pids, std::chrono::seconds limit) {
  std::vector<int> statuses(pids.size(), -2);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  size_t done = 0;
  while (done < pids.size() && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (statuses[i] != -2) continue;
      int status = 0;
      if (::waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        statuses[i] = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        ++done;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (size_t i = 0; i < pids.size(); ++i)
    if (statuses[i] == -2) {
      ::kill(pids[i], SIGKILL);
      ::waitpid(pids[i], nullptr, 0);
      statuses[i] = -1;
    }
  return statuses;
}

// Worker mode, decided before gtest starts so that the worker is not a test of its own: with
// `worker_var`=1 in the environment this process is one rank; it runs `worker` and exits with
// its status (4 when it throws, the message on stderr). Otherwise returns -1. Use as
//   const int kWorkerStatus = testing::run_as_worker_if("MM_TEST_X_WORKER", run_worker);
inline int run_as_worker_if(const char* worker_var, int (*worker)()) {
  const char* flag = std::getenv(worker_var);
  if (flag == nullptr || std::string(flag) != "1") return -1;
  int status = 0;
  try {
    status = worker();
  } catch (const std::exception& e) {
    std::cerr << "worker failed: " << e.what() << "\n";
    status = 4;
  }
  std::exit(status);
}

// Starts `world` ranks of this binary in worker mode (`worker_var`) on a free port and expects
// each to exit 0 within two minutes.
inline void expect_ranks_succeed(int world, const std::string& worker_var) {
  const int port = free_port();
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) pids.push_back(spawn_rank(r, world, port, worker_var));
  const auto statuses = wait_all(pids, std::chrono::seconds(120));
  for (int r = 0; r < world; ++r) EXPECT_EQ(statuses[r], 0) << "rank " << r << " of " << world;
}

}  // namespace mm::testing
