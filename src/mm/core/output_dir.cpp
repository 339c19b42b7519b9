#include "mm/core/output_dir.h"

#include <unistd.h>

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

void write_directory_atomically(const fs::path& target_path, const std::string& what,
                                const std::function<void(const fs::path& tmp)>& write) {
  const fs::path target = fs::absolute(target_path);
  MM_CHECK(target.has_filename(), what, ": output path ", target_path.string(), " names no directory");
  fs::create_directories(target.parent_path());
  // str_cat, not operator+: GCC 12 warns falsely (-Wstringop-overflow) on "." + string here.
  const fs::path tmp = target.parent_path() / str_cat(".", target.filename().string(), ".tmp-", ::getpid());
  const fs::path old = target.parent_path() / str_cat(".", target.filename().string(), ".old-", ::getpid());
  MM_CHECK(!fs::exists(tmp) && !fs::exists(old), what, ": ", tmp.string(), " or ", old.string(),
           " already exists (not made by this process); remove it");
  try {
    fs::create_directories(tmp);
    write(tmp);
    if (fs::exists(target)) fs::rename(target, old);
    fs::rename(tmp, target);
    fs::remove_all(old);
  } catch (const fs::filesystem_error& e) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    fail(what, ": writing ", target.string(), " failed: ", e.what());
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw;
  }
}

}  // namespace mm
