#include "mm/tasks/model_registry.h"

#include <yaml-cpp/yaml.h>

#include <map>

#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/tasks/qwen_vl_checkpoint.h"
#include "mm/tasks/video_train_config.h"
#include "mm/tasks/video_training.h"
#include "mm/tasks/vlm_chat.h"
#include "mm/tasks/vlm_training.h"
#include "mm/tasks/wan_feature_extraction.h"
#include "mm/tasks/wan_training_export.h"
#include "mm/tasks/wan_video_generation.h"
#include "mm/train/train_config.h"

namespace fs = std::filesystem;

namespace mm {
namespace {

// The Qwen-VL families share one model (its config picks the vision tower), chat pipeline, task and
// checkpoint format; `model_type` is config.json's.
ModelSpec qwen_vl(const std::string& model_type, const std::string& family) {
  ModelSpec s;
  s.name = model_type;
  s.family = family;
  s.kind = ModelKind::vision_language;
  s.key = {"config.json", "model_type", model_type};
  s.checkpoint_key = s.key;
  s.train_task = "vlm";
  s.open_chat = [](const fs::path& dir, at::ScalarType dtype, c10::Device device) -> std::unique_ptr<VisionLanguageChat> {
    return std::make_unique<QwenVLChat>(dir, dtype, device);
  };
  s.train = [](const YAML::Node& root, const std::string& file) {
    return run_vlm_training(parse_train_config(root, file));
  };
  s.export_checkpoint = export_qwen_vl_checkpoint;
  s.as_training_checkpoint = qwen_vl_as_training_checkpoint;
  return s;
}

// Text to video and image to video: one trainer (the run config's task says which).
TrainSummary train_wan(const YAML::Node& root, const std::string& file) {
  return run_video_training(parse_video_train_config(root, file));
}

ModelSpec wan_text_to_video() {
  ModelSpec s;
  s.name = "wan_t2v";
  s.family = "Wan2.1 / Wan2.2 text-to-video";
  s.kind = ModelKind::text_to_video;
  s.key = {"model_index.json", "_class_name", "WanPipeline"};
  // Its checkpoints' config.json is the DiT's, the same for text and image to video: the task the
  // trainer wrote into trainer_state.json tells them apart.
  s.checkpoint_key = {"trainer_state.json", "task", "text_to_video"};
  s.train_task = "text_to_video";
  s.generate_video = generate_wan_video;
  s.train = train_wan;
  s.extract = [](const YAML::Node& root, const std::string& file, ExtractOptions options) {
    return extract_wan_features(parse_video_train_config(root, file), file, std::move(options));
  };
  s.export_checkpoint = export_wan_training_checkpoint;
  return s;
}

ModelSpec wan_image_to_video() {
  ModelSpec s;
  s.name = "wan_i2v";
  s.family = "Wan2.1 / Wan2.2 image-to-video";
  s.kind = ModelKind::image_to_video;
  s.key = {"model_index.json", "_class_name", "WanImageToVideoPipeline"};
  s.train_task = "image_to_video";
  s.generate_video = generate_wan_video;
  s.checkpoint_key = {"trainer_state.json", "task", "image_to_video"};
  s.train = train_wan;
  s.export_checkpoint = export_wan_training_checkpoint;  // reads the task from the run config it keeps
  return s;
}

std::string supported_keys() {
  std::string out;
  for (const auto& spec : model_registry()) out += str_cat(out.empty() ? "" : "; ", spec.key.describe(), " (", spec.family, ")");
  return out;
}

// The JSON files of a directory that name its family, each read once however many keys are asked.
class KeyFiles {
 public:
  explicit KeyFiles(fs::path dir) : dir_(std::move(dir)) {}
  bool has(const std::string& file) const { return fs::is_regular_file(dir_ / file); }
  // The string at `field` of `file`, "" when the file or the field is absent or not a string.
  std::string value(const std::string& file, const std::string& field) {
    auto it = files_.find(file);
    if (it == files_.end()) it = files_.emplace(file, has(file) ? read_json_file(dir_ / file) : nlohmann::json()).first;
    const auto& json = it->second;
    if (!json.is_object() || !json.contains(field) || !json[field].is_string()) return "";
    return json[field].get<std::string>();
  }

 private:
  fs::path dir_;
  std::map<std::string, nlohmann::json> files_;
};

// The family whose key the directory holds, or null.
const ModelSpec* spec_held(KeyFiles& files) {
  for (const auto& spec : model_registry())
    if (files.value(spec.key.file, spec.key.field) == spec.key.value) return &spec;
  return nullptr;
}

// What the directory's key files say, for an error: "config.json model_type 'x'".
std::string held_keys(KeyFiles& files) {
  std::map<std::pair<std::string, std::string>, bool> seen;
  std::string out;
  for (const auto& spec : model_registry()) {
    if (seen[{spec.key.file, spec.key.field}]) continue;
    seen[{spec.key.file, spec.key.field}] = true;
    if (!files.has(spec.key.file)) continue;
    out += str_cat(out.empty() ? "" : ", ", spec.key.file, " ", spec.key.field, " '",
                   files.value(spec.key.file, spec.key.field), "'");
  }
  return out;
}

std::string command_for(ModelKind kind) {
  switch (kind) {
    case ModelKind::vision_language: return "mmtrain infer / mmtrain eval";
    case ModelKind::text_to_video: return "mmtrain infer t2v";
    case ModelKind::image_to_video: return "mmtrain infer i2v";
  }
  return "";
}

}  // namespace

const char* to_string(ModelKind kind) {
  switch (kind) {
    case ModelKind::vision_language: return "vision-language";
    case ModelKind::text_to_video: return "text-to-video";
    case ModelKind::image_to_video: return "image-to-video";
  }
  return "?";
}

std::string ModelKey::describe() const { return str_cat(file, " ", field, ": ", value); }

std::string ModelSpec::commands() const {
  std::vector<std::string> parts;
  if (open_chat) parts.push_back("infer, eval");
  if (generate_video) parts.push_back(kind == ModelKind::image_to_video ? "infer i2v [--last-image]" : "infer t2v");
  if (train) parts.push_back("train (task: " + train_task + ")");
  if (extract) parts.push_back("extract");
  if (export_checkpoint) parts.push_back("export and convert of its training checkpoints");
  if (as_training_checkpoint) parts.push_back("convert --slices N of a model directory");
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

const std::vector<ModelSpec>& model_registry() {
  static const std::vector<ModelSpec> registry = {qwen_vl("qwen2_5_vl", "Qwen2.5-VL"), qwen_vl("qwen2_vl", "Qwen2-VL"),
                                                  qwen_vl("qwen3_vl", "Qwen3-VL"), qwen_vl("qwen3_vl_moe", "Qwen3-VL-MoE"),
                                                  qwen_vl("qwen3_5", "Qwen3.5"), qwen_vl("qwen3_5_moe", "Qwen3.5-MoE"),
                                                  wan_text_to_video(), wan_image_to_video()};
  return registry;
}

const ModelSpec& model_spec_of(const fs::path& dir) {
  MM_CHECK(fs::is_directory(dir), dir.string(), ": not a directory");
  KeyFiles files(dir);
  if (const ModelSpec* spec = spec_held(files)) return *spec;
  const auto held = held_keys(files);
  MM_CHECK(!held.empty(), dir.string(),
           ": has neither config.json nor model_index.json, so it is no Hugging Face model or diffusers pipeline "
           "directory (supported: ", supported_keys(), ")");
  fail(dir.string(), ": ", held, " is no model family this build supports (supported: ", supported_keys(),
       "; `mmtrain models` lists them)");
}

const ModelSpec& model_spec_of(const fs::path& dir, const std::vector<ModelKind>& kinds, const std::string& command) {
  const ModelSpec& spec = model_spec_of(dir);
  for (const auto kind : kinds)
    if (spec.kind == kind) return spec;
  const std::string kind_name = to_string(spec.kind);
  fail(dir.string(), kind_name[0] == 'i' ? " is an " : " is a ", kind_name, " model (", spec.family, ", ",
       spec.key.describe(), "); ", command, " does not run it: use ", command_for(spec.kind));
}

const ModelSpec& model_spec_of_checkpoint(const fs::path& checkpoint_dir) {
  const auto file = checkpoint_dir / "config.json";
  MM_CHECK(fs::is_regular_file(file), file.string(), ": missing (a training checkpoint carries its model's config)");
  KeyFiles files(checkpoint_dir);
  std::string supported;
  for (const auto& spec : model_registry()) {
    if (spec.checkpoint_key.value.empty()) continue;
    if (files.value(spec.checkpoint_key.file, spec.checkpoint_key.field) == spec.checkpoint_key.value) return spec;
    supported += str_cat(supported.empty() ? "" : ", ", spec.checkpoint_key.field, " ", spec.checkpoint_key.value, " (",
                         spec.family, ")");
  }
  fail(file.string(), ": model_type '", files.value("config.json", "model_type"), "', _class_name '",
       files.value("config.json", "_class_name"),
       "' is no training checkpoint of a family mmtrain trains (supported: ", supported, ")");
}

const ModelSpec& model_spec_of_run_config(const YAML::Node& root, const std::string& file) {
  const std::string task = train_task_of(root, file);
  std::string tasks;
  const ModelSpec* found = nullptr;
  for (const auto& spec : model_registry()) {
    if (!spec.train) continue;
    if (spec.train_task == task && !found) found = &spec;
    if (tasks.find(spec.train_task) == std::string::npos) tasks += (tasks.empty() ? "" : ", ") + spec.train_task;
  }
  MM_CHECK(found, file, ": task: '", task, "' is not one of ", tasks);
  // Several families may share a task (Qwen2-VL and Qwen2.5-VL: vlm); the directory says which.
  // The model directory is the truth: a run config whose task trains another family than the
  // directory holds fails here, before anything is loaded.
  const YAML::Node model = root["model"];
  if (model.IsMap() && model["path"].IsScalar()) {
    const fs::path dir = model["path"].as<std::string>();
    if (fs::is_directory(dir)) {
      KeyFiles files(dir);
      const ModelSpec* held = spec_held(files);
      MM_CHECK(!held || held->train_task == task, file, ": model.path ", dir.string(), " is ",
               held->family, " (", held->key.describe(), "), which task: ", task, " does not train",
               held->train_task.empty() ? std::string(" (mmtrain does not train it)")
                                        : str_cat(" (set task: ", held->train_task, ")"));
      if (held) return *held;
    }
  }
  return *found;
}

}  // namespace mm
