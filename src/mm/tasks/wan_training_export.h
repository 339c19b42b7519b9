// The final model of a Wan DiT training run, and any of its checkpoints (`mmtrain export`,
// `mmtrain convert`), as a diffusers pipeline directory: the trained transformer (and its EMA as
// transformer_ema/, which `mmtrain infer t2v --transformer transformer_ema` samples), every other
// component the source pipeline's, hard-linked or copied (the random text encoder, VAE and CLIP
// image encoder of model.random_frozen written out instead). diffusers' WanPipeline (or
// WanImageToVideoPipeline).from_pretrained loads it.
#pragma once
#include <filesystem>

#include "mm/checkpoint/checkpoint_io.h"
#include "mm/tasks/video_train_config.h"

namespace mm {

class WanModel;

// Writes `out` (replacing an earlier output of ours there; written into a sibling and renamed into
// place). `transformer`: the trained DiT's weights by diffusers name; `ema`: its EMA under the same
// names, or empty. `frozen`: the run's model when model.random_frozen (its random text encoder,
// VAE and image encoder are written), else null (the source pipeline's are linked).
void write_wan_training_export(const VideoTrainConfig::Model& model, const WanModel* frozen,
                               const NamedTensors& transformer, const NamedTensors& ema,
                               const std::filesystem::path& out);

// A Wan training checkpoint (one process or sharded by any number of ranks) as that directory:
// the source pipeline and settings come from the run config the checkpoint keeps; the EMA weights
// (kept as ema.* optimizer state, whole after resharding) become transformer_ema/.
void export_wan_training_checkpoint(const std::filesystem::path& checkpoint_dir, const std::filesystem::path& out);

}  // namespace mm
