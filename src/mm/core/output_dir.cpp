#include "mm/core/output_dir.h"

#include "mm/core/error.h"

namespace fs = std::filesystem;

namespace mm {

std::optional<fs::path> enclosing_training_output(const fs::path& path) {
  std::error_code ec;
  fs::path dir = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) dir = fs::absolute(path);
  for (; !dir.empty(); dir = dir.parent_path()) {
    if (fs::is_regular_file(dir / "trainer_state.json", ec) || fs::is_regular_file(dir / "run_config.yaml", ec) ||
        fs::is_regular_file(dir / "metrics.jsonl", ec) || fs::is_directory(dir / "checkpoints", ec))
      return dir;
    if (dir == dir.root_path()) break;
  }
  return std::nullopt;
}

void check_new_output_dir(const fs::path& dir, const std::string& option) {
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    MM_CHECK(fs::is_directory(dir, ec), option, " ", dir.string(), " exists and is not a directory");
    MM_CHECK(fs::is_empty(dir, ec), option, " ", dir.string(),
             " already exists and is not empty: give a new directory (nothing is overwritten)");
  }
  if (const auto run = enclosing_training_output(dir))
    fail(option, " ", dir.string(), " is inside the training output ", run->string(),
         ": give a directory outside it (a run's files are never written over)");
}

}  // namespace mm
