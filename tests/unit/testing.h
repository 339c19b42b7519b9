// Shared helpers for the C++ tests: where goldens live, loading them, comparing tensors.
#pragma once
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "mm/core/error.h"
#include "test_paths.h"
#include "mm/core/safetensors.h"

namespace mm::testing {

inline const std::string kPython = MM_TEST_PYTHON;        // the venv with the oracles
inline const std::string kMmtrain = MM_TEST_BIN;          // the CLI binary
// The same CLI with fault injection (tests/harness/mmtrain_with_faults.cpp): MM_FAULT_* variables.
inline const std::string kMmtrainWithFaults = MM_TEST_FAULTS_BIN;
inline const std::filesystem::path kSourceDir = MM_TEST_SOURCE_DIR;

// Directory the oracle `name` wrote its goldens into (ctest runs the oracle first).
inline std::filesystem::path golden_dir(const std::string& oracle) {
  return std::filesystem::path(MM_TEST_GOLDEN_DIR) / oracle;
}

inline std::filesystem::path temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("mm_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  if (a.sizes() != b.sizes()) return INFINITY;
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// Runs a shell command, returns {exit status, stdout with (or without) stderr}.
inline std::pair<int, std::string> run_command(const std::string& cmd, bool with_stderr = true) {
  std::string out;
  FILE* p = ::popen((cmd + (with_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  if (!p) return {-1, ""};
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// `mmtrain data synth --kind shapes` into a fresh temporary directory named after `name`.
inline std::filesystem::path synth_shapes_data(const std::string& name, int train, int test, int seed) {
  const auto dir = temp_dir(name);
  auto [status, out] = run_command(kMmtrain + " data synth --kind shapes --out " + dir.string() +
                                   " --train " + std::to_string(train) + " --test " +
                                   std::to_string(test) + " --seed " + std::to_string(seed));
  EXPECT_EQ(status, 0) << out;
  return dir;
}

// A TCP port nobody listens on right now (the kernel's pick for an ephemeral bind), for a
// rendezvous; tests run in parallel, so fixed ports would collide.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace mm::testing

// EXPECT_THROW_MSG(stmt, "substring"): stmt throws mm::Error whose message contains substring.
#define EXPECT_THROW_MSG(stmt, substring)                                              \
  do {                                                                                 \
    try {                                                                              \
      stmt;                                                                            \
      ADD_FAILURE() << "expected an error containing '" << (substring) << "'";         \
    } catch (const mm::Error& e) {                                                     \
      EXPECT_NE(std::string(e.what()).find(substring), std::string::npos)              \
          << "message: " << e.what();                                                  \
    }                                                                                  \
  } while (0)
