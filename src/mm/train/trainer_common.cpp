#include "mm/train/trainer_common.h"

#include <torch/torch.h>

#include "mm/checkpoint/resharding.h"
#include "mm/core/error.h"
#include "mm/core/log.h"

namespace mm {

void setup_data_parallel(const TrainConfig::Parallel& parallel, std::optional<dist::Rendezvous>& job,
                         std::unique_ptr<parallel::DeviceMesh>& mesh, c10::Device device) {
  using parallel::MeshDim;
  const auto env = dist::DistEnv::from_env();
  if (!env.distributed()) {
    MM_CHECK(parallel.ep == 1, "parallel.ep=", parallel.ep,
             " needs as many processes (mmtrain launch, torchrun); this is one process");
    MM_CHECK(parallel.cp == 1, "parallel.cp=", parallel.cp,
             " needs as many processes (mmtrain launch, torchrun); this is one process");
    mesh = std::make_unique<parallel::DeviceMesh>();
    return;
  }
  const int64_t shard = parallel.dp_shard == 0 ? env.world_size : parallel.dp_shard;
  MM_CHECK(env.world_size % shard == 0, "parallel.dp_shard=", shard, " does not divide WORLD_SIZE=", env.world_size);
  MM_CHECK(shard % parallel.ep == 0, "parallel.ep=", parallel.ep, " does not divide parallel.dp_shard=", shard,
           " (expert parallelism takes its ranks from the data-sharding ones)");
  MM_CHECK(shard % parallel.cp == 0, "parallel.cp=", parallel.cp, " does not divide parallel.dp_shard=", shard,
           " (context parallelism takes its ranks from the data-sharding ones)");
  MM_CHECK(shard % (parallel.ep * parallel.cp) == 0, "parallel.ep=", parallel.ep, " x parallel.cp=", parallel.cp,
           " does not divide parallel.dp_shard=", shard, " (both take their ranks from the data-sharding ones)");
  const int64_t ulysses = parallel.cp_ulysses == 0 ? parallel.cp : parallel.cp_ulysses;
  dist::RendezvousOptions options;
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(parallel.timeout_s * 1000));
  job = dist::rendezvous(env, options);
  // With ep > 1 the dp_shard dimension of the mesh is what is left of it (dp_shard / ep: the
  // ranks each expert is cut over); FSDP cuts the rest over the flattened dp_shard x ep.
  parallel::DeviceMesh::Dims dims{{MeshDim::dp_replicate, env.world_size / shard},
                                  {MeshDim::dp_shard, shard / parallel.ep / parallel.cp}};
  if (parallel.ep > 1) dims.emplace_back(MeshDim::ep, parallel.ep);
  if (parallel.cp > 1) {
    // Innermost, Ulysses inside ring: cp rank = ring index x cp_ulysses + Ulysses index, and the
    // ranks of one cp group are consecutive (what data_rank_values relies on).
    dims.emplace_back(MeshDim::cp_ring, parallel.cp / ulysses);
    dims.emplace_back(MeshDim::cp_ulysses, ulysses);
  }
  // The flattened groups the layout needs: those of several dimensions of size > 1.
  std::vector<std::vector<MeshDim>> flattened;
  for (const auto& set : {parallel::kDataShardDims, parallel::kExpertShardDims, parallel::kContextParallelDims}) {
    int64_t wide = 0;
    for (const auto dim : set)
      for (const auto& [d, size] : dims) wide += d == dim && size > 1;
    if (wide >= 2) flattened.push_back(set);
  }
  mesh = std::make_unique<parallel::DeviceMesh>(*job, dims, device, /*groups_of_one=*/false, flattened);
  log::info("data parallel over ", env.world_size, " processes: ", mesh->describe(), " (",
            device.is_cuda() ? "NCCL" : "Gloo", " collectives)");
}

parallel::ShardingOptions sharding_options(const TrainConfig::Parallel& parallel) {
  parallel::ShardingOptions sharding;
  sharding.reshard_after_forward = parallel.reshard_after_forward;
  sharding.prefetch = parallel.prefetch;
  sharding.param_dtype = parallel.param_dtype;
  sharding.reduce_dtype = parallel.reduce_dtype;
  sharding.cpu_offload = parallel.cpu_offload;
  return sharding;
}

AdamWConfig adamw_config(const TrainConfig::Optim& optim) {
  AdamWConfig config;
  config.lr = optim.lr;
  config.beta1 = optim.beta1;
  config.beta2 = optim.beta2;
  config.eps = optim.eps;
  config.weight_decay = optim.weight_decay;
  config.fused = optim.fused;
  return config;
}

LrScheduleConfig lr_schedule_config(const TrainConfig::Schedule& schedule, int64_t total_steps) {
  LrScheduleConfig config;
  config.kind = schedule.kind;
  config.warmup_steps = schedule.warmup_steps;
  config.warmup_ratio = schedule.warmup_ratio;
  config.min_lr_ratio = schedule.min_lr_ratio;
  config.total_steps = total_steps;
  return config;
}

bool every_rank_has(const parallel::DeviceMesh& mesh, size_t micro_batches, int64_t expected) {
  if (mesh.world_size() == 1) return true;
  auto counts = torch::tensor({static_cast<double>(micro_batches)}, torch::kFloat64);
  mesh.all_reduce_sum(counts);
  return counts.item<double>() == static_cast<double>(mesh.world_size() * expected);
}

bool run_is_finished(const TrainConfig::Train& train, int64_t step, int64_t total_steps, const SamplerState& data) {
  return step >= total_steps || (train.max_steps == 0 && data.epoch >= train.epochs);
}

std::vector<int64_t> data_rank_values(const parallel::DeviceMesh& mesh, int64_t mine) {
  const auto all = every_rank_value(mesh, mine);
  const int64_t cp = mesh.size(parallel::kContextParallelDims);
  std::vector<int64_t> out;
  for (size_t r = 0; r < all.size(); r += static_cast<size_t>(cp)) out.push_back(all[r]);
  return out;
}

std::vector<int64_t> every_rank_value(const parallel::DeviceMesh& mesh, int64_t mine) {
  auto values = torch::zeros({mesh.world_size()}, torch::kFloat64);  // exact for counts below 2^53
  values[mesh.rank()] = static_cast<double>(mine);
  mesh.all_reduce_sum(values);
  std::vector<int64_t> out;
  for (int64_t r = 0; r < mesh.world_size(); ++r) out.push_back(static_cast<int64_t>(values[r].item<double>()));
  return out;
}

SkipTally every_rank_skips(const parallel::DeviceMesh& mesh, const SkipTally& mine) {
  SkipTally all = mine;
  if (mesh.world_size() == 1) return all;
  // Every rank's (reason, record) pairs, gathered through one summed buffer with a slot per rank.
  const auto& names = mine.reason_names();
  const nlohmann::json own = mine.records_json();
  std::vector<double> pairs;
  for (size_t r = 0; r < names.size(); ++r)
    for (const auto& record : own.at(names[r])) {
      pairs.push_back(static_cast<double>(r));
      pairs.push_back(static_cast<double>(record.get<int64_t>()));
    }
  const auto sizes = every_rank_value(mesh, static_cast<int64_t>(pairs.size()));
  int64_t offset = 0, total = 0;
  for (int64_t r = 0; r < mesh.world_size(); ++r) {
    if (r < mesh.rank()) offset += sizes[static_cast<size_t>(r)];
    total += sizes[static_cast<size_t>(r)];
  }
  if (total == 0) return all;
  auto buffer = torch::zeros({total}, torch::kFloat64);
  if (!pairs.empty())
    buffer.narrow(0, offset, static_cast<int64_t>(pairs.size())).copy_(torch::tensor(pairs, torch::kFloat64));
  mesh.all_reduce_sum(buffer);
  nlohmann::json gathered = nlohmann::json::object();
  const auto values = buffer.accessor<double, 1>();
  for (int64_t i = 0; i + 1 < total; i += 2)
    gathered[names.at(static_cast<size_t>(values[i]))].push_back(static_cast<int64_t>(values[i + 1]));
  all.merge_records(gathered, "skipped records of every rank");
  return all;
}

std::filesystem::path save_sharded_checkpoint(const std::filesystem::path& checkpoints_dir, int64_t step,
                                              TrainingCheckpoint checkpoint, const NamedTensors& buffers,
                                              const NamedTensors& optimizer_state,
                                              const parallel::FullyShardedModel& parallel,
                                              const parallel::DeviceMesh& mesh, int keep_last) {
  ShardedWrite ranks;
  ranks.rank = mesh.rank();
  ranks.world_size = mesh.world_size();
  ranks.shard = parallel.shard_index();
  ranks.shards = parallel.shard_count();
  ranks.writes_pieces = mesh.coordinate(parallel::MeshDim::dp_replicate) == 0;
  ranks.barrier = [&mesh] { mesh.barrier(); };
  auto pieces = sharded_checkpoint_pieces(parallel, buffers, optimizer_state);
  checkpoint.model = std::move(pieces.model);
  checkpoint.optimizer = std::move(pieces.optimizer);
  ranks.layout = {{"shards", ranks.shards}, {"world_size", ranks.world_size}, {"model", pieces.model_layout},
                  {"optimizer", pieces.optimizer_layout}};
  return save_sharded_training_checkpoint(checkpoints_dir, step, checkpoint, keep_last, ranks);
}

}  // namespace mm
