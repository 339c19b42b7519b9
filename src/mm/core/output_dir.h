// Guards for commands that write a new directory a user names (export, convert): they never
// delete or overwrite anything they did not create.
#pragma once
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

namespace mm {

// The training run or checkpoint that holds `path` (`path` itself or its nearest such parent):
// a directory with trainer_state.json (a checkpoint) or with run_config.yaml, metrics.jsonl or a
// checkpoints/ folder (a run's output directory). nullopt when none does.
std::optional<std::filesystem::path> enclosing_training_output(const std::filesystem::path& path);

// Throws mm::Error naming `option` and the path unless `dir` is free for a command to create:
// missing or an empty directory, and not inside a training run or checkpoint (whose files a
// later save, resume or cleanup would mix with the new ones).
void check_new_output_dir(const std::filesystem::path& dir, const std::string& option);

// Writes the directory `target` by calling write(tmp) on a hidden sibling ".<name>.tmp-<pid>" that
// is renamed into place at the end, so `target` is never half-written; an existing `target` (an
// empty directory a guard accepted, or an earlier output of this program's own) is replaced only
// then. A sibling of that name that already exists was not made by this process: it is refused,
// never deleted. On failure the sibling is removed and the error names `what` and the target.
void write_directory_atomically(const std::filesystem::path& target, const std::string& what,
                                const std::function<void(const std::filesystem::path& tmp)>& write);

}  // namespace mm
