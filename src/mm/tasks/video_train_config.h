// The run config of `mmtrain train` for text-to-video models (top-level `task: text_to_video`):
// the Wan pipeline to train, the data (raw clips, or features from `mmtrain extract`), the
// flow-matching objective, EMA, and the sections every trainer shares (train, optim, schedule,
// output, parallel). Unknown keys are errors. See examples/wan/README.md for every key.
#pragma once
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <string>

#include "mm/data/text_video_dataset.h"
#include "mm/models/diffusion/flow_matching_objective.h"
#include "mm/train/train_config.h"

namespace mm {

struct VideoTrainConfig {
  // text_to_video (WanPipeline) or image_to_video (WanImageToVideoPipeline, Wan2.1 layout: each
  // clip conditioned on its own first frame); it must match the pipeline model.path holds.
  std::string task = "text_to_video";
  struct Model {
    // A diffusers Wan pipeline directory (model_index.json, transformer/, vae/, text_encoder/,
    // tokenizer/, scheduler/). With from_scratch, transformer/ needs only its config.json and the
    // DiT starts from init_seed.
    std::filesystem::path path;
    bool from_scratch = false;
    uint64_t init_seed = 0;
    // The text encoder and VAE (and an image-to-video pipeline's CLIP image encoder) randomly
    // initialized from their configs (init_seed + 1) instead of loaded: for the tiny templates and
    // tests, which ship no weights. Exported with the result.
    bool random_frozen = false;
    int64_t max_sequence_length = 512;  // text tokens, as the pipeline's prompt embedding
  } model;

  // Raw clips (the `data` section), used unless `features.dir` is set.
  TextVideoDataConfig data;
  struct Features {
    std::filesystem::path dir;  // written by `mmtrain extract`: latents and text embeddings
    bool shuffle = true;
    bool drop_last = false;
  } features;

  TrainConfig::Train train;
  FlowMatchingObjective flow_matching;
  struct Ema {
    double decay = 0;  // 0: off; else ema = decay * ema + (1 - decay) * weights after each step
  } ema;
  TrainConfig::Optim optim;
  TrainConfig::Schedule schedule;
  TrainConfig::Output output;
  TrainConfig::Parallel parallel;

  bool from_features() const { return !features.dir.empty(); }
  YAML::Node source;  // the YAML as given (after overrides)
};

VideoTrainConfig parse_video_train_config(const YAML::Node& root, const std::string& file);

}  // namespace mm
