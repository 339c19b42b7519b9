// `mmtrain launch`: workers get the torchrun environment (inherited values replaced), and a
// worker that fails, a worker that ignores SIGTERM or a Ctrl-C to the launcher end the whole
// job quickly with no worker left behind. Workers are small shell scripts (--program /bin/sh).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <optional>
#include <thread>

#include "mm/dist/launcher.h"
#include "testing.h"

extern char** environ;

namespace mm {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A worker script run as `sh DIR/worker.sh DIR`. Workers that should stay alive write their pid
// to DIR/pid$RANK (atomically, via rename) and `exec sleep 60`, so the pid is the sleeping one.
fs::path write_worker_script(const fs::path& dir, const std::string& body) {
  const auto path = dir / "worker.sh";
  std::ofstream(path) << "dir=$1\n" << body << "\n";
  return path;
}

// The launch options that run `body` as the worker script.
std::string worker_script(const fs::path& dir, const std::string& body) {
  return "--program /bin/sh -- " + write_worker_script(dir, body).string() + " " + dir.string();
}

const std::string kWriteMyPidThenSleep =
    "echo $$ > $dir/pid$RANK.tmp && mv $dir/pid$RANK.tmp $dir/pid$RANK && exec sleep 60";
const std::string kWaitForRank0 = "while [ ! -e $dir/pid0 ]; do sleep 0.05; done";

std::pair<int, std::string> launch(const std::string& args) {
  return testing::run_command(testing::kMmtrain + " launch " + args);
}

bool wait_for_file(const fs::path& path) {
  for (const auto deadline = Clock::now() + 10s; Clock::now() < deadline; std::this_thread::sleep_for(20ms))
    if (fs::exists(path)) return true;
  return false;
}

// The wait status of `pid` once it exits; nullopt (after killing and reaping it) when it is still
// running after 10 s.
std::optional<int> wait_for_exit(pid_t pid) {
  int status = 0;
  for (const auto deadline = Clock::now() + 10s; Clock::now() < deadline; std::this_thread::sleep_for(20ms))
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return std::nullopt;
}

pid_t read_pid(const fs::path& path) {
  pid_t pid = -1;
  std::ifstream(path) >> pid;
  return pid;
}

// Neither running nor a zombie: the launcher reaped it.
bool process_gone(pid_t pid) { return ::kill(pid, 0) == -1 && errno == ESRCH; }

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST(Launcher, WorkersGetTheTorchrunEnvironment) {
  const auto dir = testing::temp_dir("launch_env");
  const auto [status, output] = launch(
      "--nproc-per-node 3 --master-port 29876 --program /bin/sh -- -c "
      "'echo \"$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT\" > " +
      dir.string() + "/rank$RANK'");
  ASSERT_EQ(status, 0) << output;
  EXPECT_NE(output.find("3 workers"), std::string::npos) << output;
  EXPECT_NE(output.find("127.0.0.1:29876"), std::string::npos) << output;
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_EQ(read_file(dir / ("rank" + std::to_string(rank))), std::to_string(rank) + " 3 " +
                                                                     std::to_string(rank) +
                                                                     " 3 0 127.0.0.1 29876\n");
  fs::remove_all(dir);
}

TEST(Launcher, InheritedTorchrunVariablesAreReplaced) {
  const auto dir = testing::temp_dir("launch_inherit");
  const auto [status, output] = testing::run_command(
      "RANK=7 WORLD_SIZE=9 MASTER_ADDR=10.0.0.1 " + testing::kMmtrain +
      " launch --nproc-per-node 2 --program /bin/sh -- -c 'echo \"$RANK $WORLD_SIZE $MASTER_ADDR\" > " +
      dir.string() + "/rank$RANK'");
  ASSERT_EQ(status, 0) << output;
  EXPECT_EQ(read_file(dir / "rank0"), "0 2 127.0.0.1\n");
  EXPECT_EQ(read_file(dir / "rank1"), "1 2 127.0.0.1\n");
  EXPECT_FALSE(fs::exists(dir / "rank7"));
  fs::remove_all(dir);
}

TEST(Launcher, WorkerEnvironmentHoldsEachVariableOnce) {
  dist::LaunchOptions options;
  options.nproc_per_node = 2;
  const auto env = dist::worker_environment(options, 1, {"PATH=/bin", "RANK=7", "MASTER_PORT=1", "RANKS=x"});
  EXPECT_EQ(std::count(env.begin(), env.end(), "PATH=/bin"), 1);
  EXPECT_EQ(std::count(env.begin(), env.end(), "RANKS=x"), 1);
  EXPECT_EQ(std::count(env.begin(), env.end(), "RANK=1"), 1);
  EXPECT_EQ(std::count(env.begin(), env.end(), "MASTER_PORT=29500"), 1);
  EXPECT_EQ(std::count_if(env.begin(), env.end(), [](const std::string& e) { return e.starts_with("RANK="); }), 1);
  EXPECT_EQ(std::count_if(env.begin(), env.end(), [](const std::string& e) { return e.starts_with("MASTER_PORT="); }),
            1);
}

TEST(Launcher, SecondNodeNumbersItsRanksAfterTheFirst) {
  const auto dir = testing::temp_dir("launch_nodes");
  const auto [status, output] = launch(
      "--nnodes 2 --node-rank 1 --nproc-per-node 2 --program /bin/sh -- -c "
      "'echo \"$RANK $WORLD_SIZE $LOCAL_RANK $GROUP_RANK\" > " +
      dir.string() + "/rank$RANK'");
  ASSERT_EQ(status, 0) << output;
  EXPECT_EQ(read_file(dir / "rank2"), "2 4 0 1\n");
  EXPECT_EQ(read_file(dir / "rank3"), "3 4 1 1\n");
  EXPECT_FALSE(fs::exists(dir / "rank0"));
  EXPECT_FALSE(fs::exists(dir / "rank1"));
  fs::remove_all(dir);
}

TEST(Launcher, RunsMmtrainItselfByDefault) {
  const auto [status, output] = launch("--nproc-per-node 2 -- --help");
  ASSERT_EQ(status, 0) << output;
  size_t helps = 0;
  for (size_t at = output.find("Subcommands:"); at != std::string::npos; at = output.find("Subcommands:", at + 1))
    ++helps;
  EXPECT_EQ(helps, 2u) << output;
}

TEST(Launcher, KilledWorkerStopsTheOthers) {
  const auto dir = testing::temp_dir("launch_killed");
  const auto start = Clock::now();
  const auto [status, output] = launch(
      "--nproc-per-node 2 " + worker_script(dir, "if [ $RANK = 0 ]; then " + kWriteMyPidThenSleep + "; fi\n" +
                                                    kWaitForRank0 + "\nkill -9 $$\n"));
  EXPECT_NE(status, 0);
  EXPECT_LT(seconds_since(start), 20.0);
  EXPECT_NE(output.find("rank 1 (local rank 1, pid "), std::string::npos) << output;
  EXPECT_NE(output.find("killed by signal 9 (SIGKILL)"), std::string::npos) << output;
  EXPECT_NE(output.find("mmtrain: error: rank 1"), std::string::npos) << output;
  const pid_t rank0 = read_pid(dir / "pid0");
  ASSERT_GT(rank0, 0);
  EXPECT_TRUE(process_gone(rank0));
  fs::remove_all(dir);
}

TEST(Launcher, FailedWorkerStatusIsNamed) {
  const auto dir = testing::temp_dir("launch_status");
  const auto start = Clock::now();
  const auto [status, output] = launch(
      "--nproc-per-node 3 " + worker_script(dir, "if [ $RANK != 1 ]; then " + kWriteMyPidThenSleep + "; fi\n" +
                                                    "while [ ! -e $dir/pid0 ] || [ ! -e $dir/pid2 ]; do sleep 0.05; "
                                                    "done\nexit 3\n"));
  EXPECT_NE(status, 0);
  EXPECT_LT(seconds_since(start), 20.0);
  EXPECT_NE(output.find("mmtrain: error: rank 1 (local rank 1, pid "), std::string::npos) << output;
  EXPECT_NE(output.find("exited with status 3"), std::string::npos) << output;
  for (const char* file : {"pid0", "pid2"}) {
    const pid_t pid = read_pid(dir / file);
    ASSERT_GT(pid, 0) << file;
    EXPECT_TRUE(process_gone(pid)) << file;
  }
  fs::remove_all(dir);
}

TEST(Launcher, WorkerIgnoringSigtermIsKilledAfterTheStopTimeout) {
  const auto dir = testing::temp_dir("launch_stubborn");
  const auto start = Clock::now();
  const auto [status, output] = launch(
      "--nproc-per-node 2 --stop-timeout 1 " +
      worker_script(dir, "if [ $RANK = 0 ]; then trap '' TERM; " + kWriteMyPidThenSleep + "; fi\n" + kWaitForRank0 +
                             "\nexit 3\n"));
  EXPECT_NE(status, 0);
  EXPECT_LT(seconds_since(start), 20.0);
  EXPECT_NE(output.find("exited with status 3"), std::string::npos) << output;
  EXPECT_NE(output.find("rank 0 (local rank 0, pid "), std::string::npos) << output;
  EXPECT_NE(output.find("sending SIGKILL"), std::string::npos) << output;
  const pid_t rank0 = read_pid(dir / "pid0");
  ASSERT_GT(rank0, 0);
  EXPECT_TRUE(process_gone(rank0));
  fs::remove_all(dir);
}

TEST(Launcher, InterruptStopsAllWorkers) {
  const auto dir = testing::temp_dir("launch_interrupt");
  const auto log = dir / "launch.log";
  const auto script = write_worker_script(dir, kWriteMyPidThenSleep);
  std::vector<std::string> args = {testing::kMmtrain, "launch", "--nproc-per-node", "2", "--program", "/bin/sh",
                                   "--", script.string(), dir.string()};
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&files, STDOUT_FILENO, STDERR_FILENO);
  pid_t launcher = -1;
  ASSERT_EQ(::posix_spawn(&launcher, args[0].c_str(), &files, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&files);

  const bool started = wait_for_file(dir / "pid0") && wait_for_file(dir / "pid1");
  ::kill(launcher, SIGINT);
  const auto status = wait_for_exit(launcher);
  ASSERT_TRUE(started) << read_file(log);
  ASSERT_TRUE(status) << "the launcher did not exit within 10 s of SIGINT";
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_NE(WEXITSTATUS(*status), 0);
  const auto output = read_file(log);
  EXPECT_NE(output.find("mmtrain: error: interrupted by SIGINT"), std::string::npos) << output;
  for (const char* file : {"pid0", "pid1"}) {
    const pid_t pid = read_pid(dir / file);
    ASSERT_GT(pid, 0) << file;
    EXPECT_TRUE(process_gone(pid)) << file;
  }
  fs::remove_all(dir);
}

TEST(Launcher, BadArgumentsNameTheOption) {
  const std::string sh = " --program /bin/sh -- -c true";
  const std::pair<std::string, std::string> cases[] = {
      {"--nproc-per-node 0" + sh, "--nproc-per-node must be at least 1"},
      {"--nproc-per-node 1 --nnodes 0" + sh, "--nnodes must be at least 1"},
      {"--nproc-per-node 1 --nnodes 2 --node-rank 2" + sh, "--node-rank must be in 0..1"},
      {"--nproc-per-node 1 --master-port 70000" + sh, "--master-port must be in 1..65535"},

      {"--nproc-per-node 1 --program /nonexistent/tool -- x", "--program /nonexistent/tool: no such executable"},
  };
  for (const auto& [args, message] : cases) {
    const auto [status, output] = launch(args);
    EXPECT_EQ(status, 1) << args;
    EXPECT_NE(output.find("mmtrain: error: " + message), std::string::npos) << args << "\n" << output;
  }  // No worker command is a usage error (exit 2).
  const auto [status, output] = launch("--nproc-per-node 1 --");
  EXPECT_EQ(status, 2) << output;
  EXPECT_NE(output.find("mmtrain: error: launch: no worker command"), std::string::npos) << output;
}

}  // namespace
}  // namespace mm
