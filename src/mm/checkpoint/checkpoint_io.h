// Training checkpoints on disk, crash-safe:
//   <checkpoints_dir>/step-00000010/  model.safetensors (or shards + index), optimizer.safetensors,
//                                     rng.safetensors, trainer_state.json, caller's extra files
//   <checkpoints_dir>/latest          the name of the newest complete checkpoint directory
// A checkpoint is written into "step-00000010.tmp-<pid>", every file and the directory fsynced,
// renamed into place (parent fsynced), and only then is `latest` replaced, atomically. A crash
// at any point leaves `latest` naming a complete checkpoint; leftovers are removed next save.
#pragma once
#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mm/core/safetensors.h"

namespace mm {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

struct TrainingCheckpoint {
  NamedTensors model;      // HF-named weights (or only the trainable ones), any device
  NamedTensors optimizer;  // AdamW::state_tensors()
  NamedTensors rng;        // RngState::to_tensors()
  nlohmann::json state;    // trainer_state.json: step, sampler position, config ...
  // Files copied in under the given plain file name (HF config.json, tokenizer files ...), so
  // the checkpoint directory is self-contained.
  std::vector<std::pair<std::string, std::filesystem::path>> extra_files;
};

// "step-00000010".
std::string checkpoint_dir_name(int64_t step);

// Writes the checkpoint for `step`, moves `latest` to it, then deletes all but the newest
// `keep_last` complete checkpoints (keep_last <= 0 keeps all; the one `latest` names is never
// deleted). Stale *.tmp-* directories from crashed writers are removed first. Returns the
// checkpoint directory.
std::filesystem::path save_training_checkpoint(const std::filesystem::path& checkpoints_dir,
                                               int64_t step, const TrainingCheckpoint& checkpoint,
                                               int keep_last);

// The directory `latest` names, or nullopt when there is no `latest` (a fresh run). A `latest`
// naming a missing or incomplete directory is an error naming what is missing.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& checkpoints_dir);

struct LoadedTrainingCheckpoint {
  Checkpoint model;       // tensors alias the mapped files
  Checkpoint optimizer;
  Checkpoint rng;
  nlohmann::json state;
  std::filesystem::path dir;
};

// Opens a checkpoint directory written by save_training_checkpoint; errors name the file.
LoadedTrainingCheckpoint load_training_checkpoint(const std::filesystem::path& dir);

// ---- checkpoints of multi-process runs ----
// Every rank writes its own pieces into the same directory (on a filesystem all ranks share):
//   sharding.json                          how each tensor is cut (see ShardedWrite::layout)
//   model-shard-00001-of-00004.safetensors  the rows shard 1 holds of each sharded tensor (and,
//   optimizer-shard-00001-of-00004...       in shard 0's files, every whole tensor; under expert
//                                           parallelism each rank's experts are in its own files)
//   rng-rank-00003.safetensors              each rank's generators
//   trainer_state.json, extra files         rank 0
// Rank 0 prepares and commits (rename, `latest`) with barriers between, so the protocol and the
// crash guarantees are those of save_training_checkpoint.
struct ShardedWrite {
  int64_t rank = 0, world_size = 1;
  int64_t shard = 0, shards = 1;  // this rank's slice index and the slice count
  bool writes_pieces = true;      // one replica per slice writes model and optimizer pieces
  // sharding.json (used from rank 0): {"shards": S, "world_size": W, "model": {name: layout},
  // "optimizer": {name: layout}} with layout {"shape": [...], "dtype": "F32", "sharded": bool,
  // "rows_per_shard": r}.
  nlohmann::json layout;
  std::function<void()> barrier;  // over all ranks
};

// File names of the layout above, and one tensor's entry in sharding.json.
std::string model_slice_file(int64_t slice, int64_t slices);
std::string optimizer_slice_file(int64_t slice, int64_t slices);
std::string rng_rank_file(int64_t rank);
nlohmann::json slice_layout_json(const std::vector<int64_t>& shape, c10::ScalarType dtype, bool sharded,
                                 int64_t rows_per_shard);

// `piece`: this rank's model and optimizer pieces, its rng, and (rank 0) the state and extra files.
std::filesystem::path save_sharded_training_checkpoint(const std::filesystem::path& checkpoints_dir, int64_t step,
                                                       const TrainingCheckpoint& piece, int keep_last,
                                                       const ShardedWrite& ranks);

// Any training checkpoint (one process or sharded) as whole tensors, e.g. to resume on another
// number of ranks or layout. Sharded tensors are put back together from their row slices.
struct WholeTrainingCheckpoint {
  NamedTensors model, optimizer;
  NamedTensors rng;  // `rank`'s generators, rank 0's when the run that saved had fewer ranks
  nlohmann::json state;
  std::filesystem::path dir;
  int64_t saved_world_size = 1;
  std::vector<Checkpoint> files;  // the mapped files the tensors may alias
  // The files it carries besides its tensors and trainer_state.json (the model's config,
  // tokenizer and processor files ...), which a copy of it carries too.
  std::vector<std::filesystem::path> extra_files;
};
WholeTrainingCheckpoint load_whole_training_checkpoint(const std::filesystem::path& dir, int64_t rank = 0);

// Only the optimizer-state tensors whose names start with `prefix` ("ema."), whole, from a
// checkpoint of any number of processes: what the final export needs without the whole state.
NamedTensors load_whole_optimizer_tensors(const std::filesystem::path& dir, const std::string& prefix);

// The files of checkpoint `dir` besides its tensors, sharding.json and trainer_state.json.
std::vector<std::filesystem::path> checkpoint_extra_files(const std::filesystem::path& dir);

// Finds the checkpoint `path` means: a step directory itself, or the latest one of a
// checkpoints/ folder or of a run's output directory. Throws naming the path when none.
std::filesystem::path resolve_training_checkpoint(const std::filesystem::path& path);

// All tensors of a Checkpoint as a list (mapped views, no copies).
NamedTensors checkpoint_tensors(const Checkpoint& checkpoint);

}  // namespace mm
