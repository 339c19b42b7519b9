#include "mm/tasks/checkpoint_commands.h"

#include <functional>
#include <string>

#include "mm/checkpoint/checkpoint_convert.h"
#include "mm/checkpoint/checkpoint_io.h"
#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/core/output_dir.h"
#include "mm/tasks/qwen2_5_vl_checkpoint.h"
#include "mm/tasks/wan_training_export.h"

namespace fs = std::filesystem;

namespace mm {
namespace {

using ExportFn = std::function<void(const fs::path& checkpoint, const fs::path& out)>;

constexpr const char* kSupported =
    "supported: config.json model_type qwen2_5_vl (Qwen2.5-VL), _class_name WanTransformer3DModel (a Wan DiT)";

// The export of a training checkpoint's family, by its config.json.
ExportFn exporter_of(const fs::path& checkpoint) {
  const auto file = checkpoint / "config.json";
  MM_CHECK(fs::is_regular_file(file), file.string(), ": missing (a training checkpoint carries its model's config)");
  const auto config = read_json_file(file);
  const std::string model_type = config.value("model_type", std::string());
  const std::string class_name = config.value("_class_name", std::string());
  if (model_type == "qwen2_5_vl") return export_qwen2_5_vl_checkpoint;
  if (class_name == "WanTransformer3DModel") return export_wan_training_checkpoint;
  fail(file.string(), ": model_type '", model_type, "', _class_name '", class_name,
       "' is no model family mmtrain can export (", kSupported, ")");
}

bool is_model_dir(const fs::path& dir) {
  return !fs::is_regular_file(dir / "trainer_state.json") && fs::is_regular_file(dir / "config.json") &&
         (fs::is_regular_file(dir / "model.safetensors") || fs::is_regular_file(dir / "model.safetensors.index.json"));
}

}  // namespace

fs::path export_checkpoint(const fs::path& path, const fs::path& out, const std::string& option) {
  check_new_output_dir(out, option);
  const auto dir = resolve_training_checkpoint(path);
  exporter_of(dir)(dir, out);
  return dir;
}

fs::path convert_checkpoint(const ConvertOptions& options) {
  MM_CHECK(options.slices >= 0, "--slices must not be negative");
  check_new_output_dir(options.to, "--to");
  if (is_model_dir(options.from)) {
    MM_CHECK(options.slices >= 1, options.from.string(), " is already a Hugging Face model; give --slices N to "
             "make a sharded training checkpoint of it");
    const auto config = read_json_file(options.from / "config.json");
    MM_CHECK(config.value("model_type", std::string()) == "qwen2_5_vl", (options.from / "config.json").string(),
             ": model_type '", config.value("model_type", std::string()),
             "': only Qwen2.5-VL model directories convert to training checkpoints");
    write_sliced_checkpoint(qwen2_5_vl_as_training_checkpoint(options.from), options.slices, options.to);
    return options.from;
  }
  const auto dir = resolve_training_checkpoint(options.from);
  if (options.slices == 0) {
    exporter_of(dir)(dir, options.to);
    return dir;
  }
  write_sliced_checkpoint(load_whole_training_checkpoint(dir), options.slices, options.to);
  return dir;
}

}  // namespace mm
