#include "mm/tasks/checkpoint_commands.h"

#include <string>

#include "mm/checkpoint/checkpoint_convert.h"
#include "mm/checkpoint/checkpoint_io.h"
#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/core/output_dir.h"
#include "mm/tasks/model_registry.h"

namespace fs = std::filesystem;

namespace mm {
namespace {

// The export of a training checkpoint's family, by its config.json.
const ModelSpec& exportable_spec_of(const fs::path& checkpoint) {
  const ModelSpec& spec = model_spec_of_checkpoint(checkpoint);
  MM_CHECK(spec.export_checkpoint, (checkpoint / "config.json").string(), ": ", spec.family,
           " training checkpoints have no export in this build");
  return spec;
}

bool is_model_dir(const fs::path& dir) {
  return !fs::is_regular_file(dir / "trainer_state.json") && fs::is_regular_file(dir / "config.json") &&
         (fs::is_regular_file(dir / "model.safetensors") || fs::is_regular_file(dir / "model.safetensors.index.json"));
}

}  // namespace

fs::path export_checkpoint(const fs::path& path, const fs::path& out, const std::string& option) {
  check_new_output_dir(out, option);
  const auto dir = resolve_training_checkpoint(path);
  exportable_spec_of(dir).export_checkpoint(dir, out);
  return dir;
}

fs::path convert_checkpoint(const ConvertOptions& options) {
  MM_CHECK(options.slices >= 0, "--slices must not be negative");
  check_new_output_dir(options.to, "--to");
  if (is_model_dir(options.from)) {
    MM_CHECK(options.slices >= 1, options.from.string(), " is already a Hugging Face model; give --slices N to "
             "make a sharded training checkpoint of it");
    const ModelSpec& spec = model_spec_of(options.from);
    MM_CHECK(spec.as_training_checkpoint, options.from.string(), " is ", spec.family, " (", spec.key.describe(),
             "), which does not convert to a training checkpoint in this build");
    write_sliced_checkpoint(spec.as_training_checkpoint(options.from), options.slices, options.to);
    return options.from;
  }
  const auto dir = resolve_training_checkpoint(options.from);
  if (options.slices == 0) {
    exportable_spec_of(dir).export_checkpoint(dir, options.to);
    return dir;
  }
  write_sliced_checkpoint(load_whole_training_checkpoint(dir), options.slices, options.to);
  return dir;
}

}  // namespace mm
