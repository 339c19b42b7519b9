#include "mm/dist/launcher.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include "mm/core/error.h"
#include "mm/core/log.h"

extern char** environ;

namespace mm::dist {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr auto kPollInterval = std::chrono::milliseconds(20);

bool is_executable_file(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec) && ::access(path.c_str(), X_OK) == 0;
}

// The executable the workers run: this binary when `program` is empty, else `program` as a
// path, or looked up in PATH when it has no slash (as a shell does). Empty when there is none.
std::string resolve_program(const std::string& program) {
  if (program.empty()) return fs::read_symlink("/proc/self/exe").string();
  if (program.find('/') != std::string::npos) return is_executable_file(program) ? program : "";
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const auto candidate = fs::path(dir.empty() ? "." : dir) / program;
    if (is_executable_file(candidate)) return candidate.string();
  }
  return "";
}

std::string signal_name(int signal) {
  const char* abbrev = ::sigabbrev_np(signal);
  return abbrev ? str_cat("SIG", abbrev) : str_cat("signal ", signal);
}

std::string describe_exit(int status) {
  if (WIFSIGNALED(status))
    return str_cat("was killed by signal ", WTERMSIG(status), " (", signal_name(WTERMSIG(status)), ")");
  return str_cat("exited with status ", WEXITSTATUS(status));
}

struct Worker {
  int rank = 0, local_rank = 0;
  pid_t pid = -1;
  std::optional<int> status;  // the wait status, once reaped

  bool running() const { return !status; }
  std::string label() const { return str_cat("rank ", rank, " (local rank ", local_rank, ", pid ", pid, ")"); }
};

bool any_running(const std::vector<Worker>& workers) {
  for (const auto& worker : workers)
    if (worker.running()) return true;
  return false;
}

pid_t spawn(const std::string& program, const std::vector<std::string>& args, const std::vector<std::string>& env) {
  std::vector<char*> argv{const_cast<char*>(program.c_str())};
  for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& entry : env) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, program.c_str(), nullptr, nullptr, argv.data(), envp.data());
  MM_CHECK(rc == 0, "cannot start ", program, ": ", std::strerror(rc));
  return pid;
}

// Reaps the workers that have exited; returns the first of them that failed, if any.
const Worker* reap_exited(std::vector<Worker>& workers) {
  const Worker* failed = nullptr;
  for (auto& worker : workers) {
    int status = 0;
    if (!worker.running() || ::waitpid(worker.pid, &status, WNOHANG) != worker.pid) continue;
    worker.status = status;
    if (status != 0 && failed == nullptr) failed = &worker;
  }
  return failed;
}

// SIGTERM to every live worker; SIGKILL to those still alive after `timeout_s`; all reaped.
void stop(std::vector<Worker>& workers, int timeout_s) {
  for (const auto& worker : workers)
    if (worker.running()) ::kill(worker.pid, SIGTERM);
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  for (reap_exited(workers); any_running(workers) && Clock::now() < deadline; reap_exited(workers))
    std::this_thread::sleep_for(kPollInterval);
  for (auto& worker : workers) {
    if (!worker.running()) continue;
    log::warn(worker.label(), " did not stop within ", timeout_s, " s of SIGTERM; sending SIGKILL");
    ::kill(worker.pid, SIGKILL);
    int status = 0;
    ::waitpid(worker.pid, &status, 0);
    worker.status = status;
  }
}

volatile sig_atomic_t interrupt_signal = 0;

extern "C" void on_interrupt(int signal) { interrupt_signal = signal; }

// For the duration of supervision: SIGINT and SIGTERM are recorded instead of ending the
// launcher (which would orphan the workers), and SIGCHLD has its default action, so the
// workers can be waited for even when the launcher inherited it ignored.
class SupervisionSignals {
 public:
  SupervisionSignals() {
    interrupt_signal = 0;
    struct sigaction action {};
    action.sa_handler = on_interrupt;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGINT, &action, &saved_[0]);
    ::sigaction(SIGTERM, &action, &saved_[1]);
    action.sa_handler = SIG_DFL;
    ::sigaction(SIGCHLD, &action, &saved_[2]);
  }
  ~SupervisionSignals() {
    ::sigaction(SIGINT, &saved_[0], nullptr);
    ::sigaction(SIGTERM, &saved_[1], nullptr);
    ::sigaction(SIGCHLD, &saved_[2], nullptr);
  }
  SupervisionSignals(const SupervisionSignals&) = delete;
  SupervisionSignals& operator=(const SupervisionSignals&) = delete;

 private:
  struct sigaction saved_[3];
};

// Waits until every worker has exited, one of them failed (returned) or the launcher was
// interrupted.
const Worker* supervise(std::vector<Worker>& workers) {
  while (any_running(workers) && interrupt_signal == 0) {
    if (const Worker* failed = reap_exited(workers)) return failed;
    std::this_thread::sleep_for(kPollInterval);
  }
  return nullptr;
}

}  // namespace

void validate(const LaunchOptions& options) {
  MM_CHECK(options.nproc_per_node >= 1, "--nproc-per-node must be at least 1 (got ", options.nproc_per_node, ")");
  MM_CHECK(options.nnodes >= 1, "--nnodes must be at least 1 (got ", options.nnodes, ")");
  MM_CHECK(options.node_rank >= 0 && options.node_rank < options.nnodes, "--node-rank must be in 0..",
           options.nnodes - 1, " for --nnodes ", options.nnodes, " (got ", options.node_rank, ")");
  MM_CHECK(!options.master_addr.empty(), "--master-addr must not be empty");
  MM_CHECK(options.master_port >= 1 && options.master_port <= 65535, "--master-port must be in 1..65535 (got ",
           options.master_port, ")");
  MM_CHECK(options.stop_timeout_s >= 0, "--stop-timeout must be at least 0 seconds (got ", options.stop_timeout_s,
           ")");
  MM_CHECK(!options.program.empty() || !options.args.empty(),
           "no worker command: give the mmtrain arguments after --, e.g. "
           "`mmtrain launch --nproc-per-node 2 -- train run.yaml`");
  MM_CHECK(!resolve_program(options.program).empty(), "--program ", options.program,
           ": no such executable file");
}

std::vector<std::string> worker_environment(const LaunchOptions& options, int local_rank,
                                            const std::vector<std::string>& inherited) {
  const std::pair<std::string, std::string> torchrun[] = {
      {"RANK", std::to_string(options.node_rank * options.nproc_per_node + local_rank)},
      {"WORLD_SIZE", std::to_string(options.nnodes * options.nproc_per_node)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(options.nproc_per_node)},
      {"GROUP_RANK", std::to_string(options.node_rank)},
      {"MASTER_ADDR", options.master_addr},
      {"MASTER_PORT", std::to_string(options.master_port)},
  };
  std::vector<std::string> env;
  for (const auto& entry : inherited) {
    const auto name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [variable, value] : torchrun) replaced = replaced || variable == name;
    if (!replaced) env.push_back(entry);
  }
  for (const auto& [variable, value] : torchrun) env.push_back(variable + "=" + value);
  return env;
}

void launch(const LaunchOptions& options) {
  validate(options);
  const auto program = resolve_program(options.program);
  std::vector<std::string> inherited;
  for (char** entry = environ; *entry != nullptr; ++entry) inherited.emplace_back(*entry);
  const int first_rank = options.node_rank * options.nproc_per_node;
  const int world_size = options.nnodes * options.nproc_per_node;
  log::info("starting ", options.nproc_per_node, options.nproc_per_node == 1 ? " worker" : " workers", " (ranks ",
            first_rank, "..", first_rank + options.nproc_per_node - 1, " of world size ", world_size, "), master ",
            options.master_addr, ":", options.master_port);

  SupervisionSignals signals;
  std::vector<Worker> workers;
  try {
    for (int local_rank = 0; local_rank < options.nproc_per_node; ++local_rank) {
      const auto env = worker_environment(options, local_rank, inherited);
      workers.push_back({first_rank + local_rank, local_rank, spawn(program, options.args, env), std::nullopt});
    }
  } catch (...) {
    stop(workers, options.stop_timeout_s);
    throw;
  }

  const Worker* failed = supervise(workers);
  if (failed == nullptr && !any_running(workers)) return;
  const auto reason = failed != nullptr ? str_cat(failed->label(), " ", describe_exit(*failed->status))
                                        : str_cat("interrupted by ", signal_name(interrupt_signal));
  if (failed != nullptr)
    log::error(reason, "; stopping the other workers");
  else
    log::warn(reason, "; stopping the workers");
  stop(workers, options.stop_timeout_s);
  fail(reason, "; all workers stopped");
}

}  // namespace mm::dist
