// The trainer's (trainer.cpp) pieces that stand alone: the data-parallel job and mesh, the
// sharding, optimizer and schedule settings from the run config, collectives over every rank's
// counts and skipped records, and this rank's part of a sharded checkpoint.
#pragma once
#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <optional>

#include "mm/data/sampler.h"
#include "mm/data/skip_tally.h"
#include "mm/dist/process_group.h"
#include "mm/parallel/device_mesh.h"
#include "mm/parallel/fully_shard.h"
#include "mm/checkpoint/checkpoint_io.h"
#include "mm/train/lr_schedule.h"
#include "mm/train/optimizer.h"
#include "mm/train/train_config.h"

namespace mm {

// One process: a trivial mesh and no job. Several (torchrun, mmtrain launch, Slurm variables):
// the rendezvous and a dp_replicate x dp_shard mesh over it (`mesh` refers to `job`, so both stay
// where they are), whose groups carry tensors on `device` (NCCL for a GPU, Gloo for the CPU).
// Throws mm::Error when dp_shard does not divide the world size.
void setup_data_parallel(const TrainConfig::Parallel& parallel, std::optional<dist::Rendezvous>& job,
                         std::unique_ptr<parallel::DeviceMesh>& mesh, c10::Device device);

parallel::ShardingOptions sharding_options(const TrainConfig::Parallel& parallel);
AdamWConfig adamw_config(const TrainConfig::Optim& optim);
LrScheduleConfig lr_schedule_config(const TrainConfig::Schedule& schedule, int64_t total_steps);

// Whether every rank gathered `expected` micro-batches for this step (collective). Ranks take a
// step only together: one that ran out of data (an epoch's end, with skipped samples) ends the run
// for all, instead of leaving the others waiting in a collective.
bool every_rank_has(const parallel::DeviceMesh& mesh, size_t micro_batches, int64_t expected);

// Whether a resumed run has nothing left to do: `step` reached `total_steps`, or in epoch mode
// (max_steps == 0) the data position is past the last epoch.
bool run_is_finished(const TrainConfig::Train& train, int64_t step, int64_t total_steps, const SamplerState& data);

// Every rank's `mine`, indexed by rank, on every rank (collective): each rank's count of taken
// data positions, from which the global one in trainer_state.json's "data" follows.
std::vector<int64_t> every_rank_value(const parallel::DeviceMesh& mesh, int64_t mine);
// The same over the ranks that read different data, in data-parallel order: one per context-parallel
// group (its members read the same batches).
std::vector<int64_t> data_rank_values(const parallel::DeviceMesh& mesh, int64_t mine);

// The union of every rank's skipped records (collective): a bad record met by two ranks in two
// epochs counts once.
SkipTally every_rank_skips(const parallel::DeviceMesh& mesh, const SkipTally& mine);

// Writes this rank's part of a sharded checkpoint: `checkpoint` holds the RNG, state and extra
// files; the model and optimizer slices come from `parallel` (buffers whole, in slice 0's file).
// Collective. Returns the checkpoint directory.
std::filesystem::path save_sharded_checkpoint(const std::filesystem::path& checkpoints_dir, int64_t step,
                                              TrainingCheckpoint checkpoint, const NamedTensors& buffers,
                                              const NamedTensors& optimizer_state,
                                              const parallel::FullyShardedModel& parallel,
                                              const parallel::DeviceMesh& mesh, int keep_last);

}  // namespace mm
