// The model registry: every model family mmtrain runs, keyed by what its directory itself says
// (config.json model_type for transformers models, model_index.json _class_name for diffusers
// pipelines), with what each command does with it. `train`, `infer`, `infer t2v`/`i2v`, `eval`,
// `extract`, `export`, `convert` and `models` dispatch through it and name no family; adding a
// family is its models/<family>/ folder, its tasks glue and one entry in model_registry.cpp.
//
// The family's parallel plan (its FSDP units) and its Hugging Face name map come with the entries:
// the training task a `train` entry builds shards the model by its models/<family>/*_sharding plan,
// and its loader and export share the family's one name map.
#pragma once
#include <ATen/core/ScalarType.h>
#include <yaml-cpp/node/node.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mm/checkpoint/checkpoint_io.h"
#include "mm/tasks/feature_extraction.h"
#include "mm/tasks/video_generation.h"
#include "mm/tasks/video_sampling.h"
#include "mm/tasks/vision_language_chat.h"
#include "mm/train/trainer.h"

namespace mm {

enum class ModelKind { vision_language, text_to_video, image_to_video };
const char* to_string(ModelKind kind);

// A value in a JSON file of a model directory that identifies a family.
struct ModelKey {
  std::string file;   // "config.json", "model_index.json"
  std::string field;  // "model_type", "_class_name"
  std::string value;  // "qwen2_5_vl", "WanPipeline"
  std::string describe() const;  // "config.json model_type: qwen2_5_vl"
};

struct ModelSpec {
  std::string name;    // registry name: "qwen2_5_vl", "wan_t2v"
  std::string family;  // as users know it: "Qwen2.5-VL"
  ModelKind kind;
  ModelKey key;             // in a model (or pipeline) directory
  ModelKey checkpoint_key;  // in a training checkpoint's files; empty value: not trained by mmtrain
  std::string train_task;   // the run config's `task:` that trains it; empty: not trainable

  // Entries; an empty one is a command the family does not support.
  // `infer`, `eval`: the model directory opened for chat in `dtype` on `device`.
  std::function<std::unique_ptr<VisionLanguageChat>(const std::filesystem::path& dir, at::ScalarType dtype,
                                                    c10::Device device)>
      open_chat;
  // `infer t2v` and `infer i2v`: one video from a pipeline directory.
  std::function<SampledVideo(const VideoRequest& request)> generate_video;
  // `train`: a run config (already merged with its overrides) trained to the end.
  std::function<TrainSummary(const YAML::Node& root, const std::string& file)> train;
  // `extract`: a run config's data encoded into training features.
  std::function<ExtractSummary(const YAML::Node& root, const std::string& file, ExtractOptions options)> extract;
  // `export`, `convert` (to the reference layout): a training checkpoint of this family as a
  // model or pipeline directory the reference library and mmtrain load.
  std::function<void(const std::filesystem::path& checkpoint, const std::filesystem::path& out)> export_checkpoint;
  // `convert --slices N` of a model directory: its weights as a training checkpoint at step 0.
  std::function<WholeTrainingCheckpoint(const std::filesystem::path& dir)> as_training_checkpoint;

  std::string commands() const;  // "infer, eval, train (task: vlm), export, convert" for `mmtrain models`
};

// Every family of this build, in the order `mmtrain models` lists them.
const std::vector<ModelSpec>& model_registry();

// The family of a model or pipeline directory; an error naming the directory, the keys it holds
// and every supported key otherwise.
const ModelSpec& model_spec_of(const std::filesystem::path& dir);
// The same, for a command that needs `kind`; another kind is an error naming the command to use.
const ModelSpec& model_spec_of(const std::filesystem::path& dir, const std::vector<ModelKind>& kinds,
                               const std::string& command);
// The family of a training checkpoint directory (its config.json).
const ModelSpec& model_spec_of_checkpoint(const std::filesystem::path& checkpoint_dir);
// The family a run config trains: its `task:` (absent: vlm), checked against the model.path
// directory's own key when that directory names a family.
const ModelSpec& model_spec_of_run_config(const YAML::Node& root, const std::string& file);

}  // namespace mm
