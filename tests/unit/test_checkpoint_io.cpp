// Training checkpoint files: layout, round trip, `latest`, keep-last, stale temporaries, and a
// writer SIGKILLed mid-checkpoint leaving the previous checkpoint loadable.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "mm/checkpoint/checkpoint_io.h"
#include "testing.h"

namespace fs = std::filesystem;

namespace {

mm::TrainingCheckpoint make_checkpoint(int64_t step, int64_t big_elements = 0) {
  mm::TrainingCheckpoint c;
  c.model = {{"model.embed_tokens.weight", torch::arange(12, torch::kFloat).reshape({3, 4}) + step},
             {"model.norm.weight", torch::full({4}, static_cast<double>(step), torch::kBFloat16)}};
  if (big_elements > 0)
    c.model.emplace_back("model.big", torch::full({big_elements}, 1.5f));
  c.optimizer = {{"exp_avg.model.norm.weight", torch::full({4}, 0.25f)},
                 {"step.model.norm.weight", torch::tensor(static_cast<float>(step))}};
  c.rng = {{"rng.cpu", torch::arange(16, torch::kUInt8)}};
  c.state = {{"step", step}, {"sampler", {{"epoch", 0}, {"index", step * 4}}}};
  return c;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void expect_checkpoint_of(const fs::path& dir, int64_t step) {
  const auto loaded = mm::load_training_checkpoint(dir);
  EXPECT_EQ(loaded.state["step"].get<int64_t>(), step);
  EXPECT_EQ(loaded.state["sampler"]["index"].get<int64_t>(), step * 4);
  EXPECT_TRUE(torch::equal(loaded.model.tensor("model.embed_tokens.weight"),
                           torch::arange(12, torch::kFloat).reshape({3, 4}) + step));
  EXPECT_EQ(loaded.model.tensor("model.norm.weight").scalar_type(), torch::kBFloat16);
  EXPECT_EQ(loaded.optimizer.tensor("step.model.norm.weight").item<float>(), static_cast<float>(step));
  EXPECT_TRUE(torch::equal(loaded.rng.tensor("rng.cpu"), torch::arange(16, torch::kUInt8)));
}

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(CheckpointIo, SavesTheLayoutAndLoadsItBack) {
  const auto root = mm::testing::temp_dir("ckpt_layout");
  const auto extra = root / "config.json";
  std::ofstream(extra) << "{\"model_type\": \"qwen2_5_vl\"}";
  auto c = make_checkpoint(10);
  c.extra_files = {{"config.json", extra}};
  const auto dir = mm::save_training_checkpoint(root / "checkpoints", 10, c, 3);
  EXPECT_EQ(dir, root / "checkpoints" / "step-00000010");
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"config.json", "model.safetensors",
                                                    "optimizer.safetensors", "rng.safetensors",
                                                    "trainer_state.json"}));
  EXPECT_EQ(read(root / "checkpoints" / "latest"), "step-00000010\n");
  EXPECT_EQ(read(dir / "config.json"), "{\"model_type\": \"qwen2_5_vl\"}");
  EXPECT_EQ(mm::latest_checkpoint(root / "checkpoints"), dir);
  expect_checkpoint_of(dir, 10);
  EXPECT_EQ(mm::checkpoint_tensors(mm::load_training_checkpoint(dir).model).size(), 2u);
}

TEST(CheckpointIo, KeepsTheLastNAndMovesLatest) {
  const auto root = mm::testing::temp_dir("ckpt_keep") / "checkpoints";
  EXPECT_FALSE(mm::latest_checkpoint(root).has_value());
  for (int64_t step = 1; step <= 5; ++step) mm::save_training_checkpoint(root, step, make_checkpoint(step), 2);
  EXPECT_EQ(entries(root), (std::vector<std::string>{"latest", "step-00000004", "step-00000005"}));
  EXPECT_EQ(mm::latest_checkpoint(root), root / "step-00000005");
  expect_checkpoint_of(root / "step-00000004", 4);

  // Saving an existing step again replaces it; keep_last <= 0 keeps everything.
  mm::save_training_checkpoint(root, 5, make_checkpoint(5), 0);
  mm::save_training_checkpoint(root, 6, make_checkpoint(6), 0);
  EXPECT_EQ(entries(root), (std::vector<std::string>{"latest", "step-00000004", "step-00000005",
                                                     "step-00000006"}));
}

TEST(CheckpointIo, ErrorsNameWhatIsMissing) {
  const auto root = mm::testing::temp_dir("ckpt_errors") / "checkpoints";
  mm::save_training_checkpoint(root, 1, make_checkpoint(1), 0);
  fs::remove(root / "step-00000001" / "optimizer.safetensors");
  EXPECT_THROW_MSG(mm::latest_checkpoint(root), "optimizer.safetensors");
  EXPECT_THROW_MSG(mm::load_training_checkpoint(root / "step-00000001"), "optimizer.safetensors");
  mm::write_file_atomic(root / "latest", "garbage\n");
  EXPECT_THROW_MSG(mm::latest_checkpoint(root), "garbage");

  auto c = make_checkpoint(2);
  c.extra_files = {{"../escape", root / "latest"}};
  EXPECT_THROW_MSG(mm::save_training_checkpoint(root, 2, c, 0), "../escape");
  c.extra_files = {{"optimizer.safetensors", root / "latest"}};
  EXPECT_THROW_MSG(mm::save_training_checkpoint(root, 2, c, 0), "optimizer.safetensors");
  c.extra_files = {{"tokenizer.json", root / "no_such_file"}};
  EXPECT_THROW_MSG(mm::save_training_checkpoint(root, 2, c, 0), "no_such_file");
}

// The writer child: this test binary re-executed with MM_TEST_CHECKPOINT_WRITER=<dir>; it
// saves a big step-2 checkpoint until the parent kills it. Runs before main(), so gtest never
// starts in the child.
[[maybe_unused]] const bool kIsWriterChild = [] {
  const char* dir = std::getenv("MM_TEST_CHECKPOINT_WRITER");
  if (!dir) return false;
  mm::save_training_checkpoint(dir, 2, make_checkpoint(2, 96ll << 20), 3);  // 384 MiB
  std::_Exit(0);
}();

TEST(CheckpointIo, KillDuringWriteLeavesThePreviousCheckpointLoadable) {
  const auto root = mm::testing::temp_dir("ckpt_kill") / "checkpoints";
  mm::save_training_checkpoint(root, 1, make_checkpoint(1), 3);

  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::setenv("MM_TEST_CHECKPOINT_WRITER", root.c_str(), 1);
    ::execl("/proc/self/exe", "writer", static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  // Kill as soon as the child has started writing a file inside its temporary directory.
  const fs::path tmp = root / ("step-00000002.tmp-" + std::to_string(child));
  bool writing = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!writing && std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    writing = fs::is_directory(tmp, ec) && !fs::is_empty(tmp, ec);
    if (!writing) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(writing) << "the writer never started its checkpoint";
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the writer finished before the kill";

  EXPECT_TRUE(fs::exists(tmp));
  EXPECT_FALSE(fs::exists(root / "step-00000002"));
  const auto latest = mm::latest_checkpoint(root);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(*latest, root / "step-00000001");
  expect_checkpoint_of(*latest, 1);

  // The next save cleans up the dead writer's temporary directory (and a torn `latest` write).
  std::ofstream(root / "latest.tmp.99999") << "step-000";
  mm::save_training_checkpoint(root, 3, make_checkpoint(3), 3);
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_FALSE(fs::exists(root / "latest.tmp.99999"));
  EXPECT_EQ(entries(root), (std::vector<std::string>{"latest", "step-00000001", "step-00000003"}));
  expect_checkpoint_of(*mm::latest_checkpoint(root), 3);
}

}  // namespace
