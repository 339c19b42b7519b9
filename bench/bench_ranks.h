// The processes of a multi-process benchmark, started as ranks by `mmtrain launch --program` or
// alone (a world of one): the rendezvous, a Gloo group of every rank, and every rank's value of
// a measurement in rank order (each rank's peak memory, for rank 0's JSON line).
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mm/dist/process_group.h"

namespace mm::bench {

struct BenchRanks {
  int64_t world = 1, rank = 0;
  std::optional<dist::Rendezvous> job;        // joined when launched as ranks
  c10::intrusive_ptr<c10d::Backend> everyone;  // every rank ("cp"); null alone

  static BenchRanks join() {
    BenchRanks out;
    const auto env = dist::DistEnv::from_env();
    if (!env.distributed()) return out;
    out.world = env.world_size;
    out.rank = env.rank;
    out.job = dist::rendezvous(env);
    std::vector<int64_t> all;
    for (int64_t r = 0; r < out.world; ++r) all.push_back(r);
    out.everyone = dist::new_gloo_group(*out.job, all, "cp");
    return out;
  }

  // Every rank's `value`, in rank order (an all-reduce of a vector holding each at its place).
  std::vector<double> from_every_rank(double value) const {
    auto values = torch::zeros({world}, torch::kFloat64);
    values[rank] = value;
    if (everyone) {
      std::vector<at::Tensor> buffer{values};
      everyone->allreduce(buffer)->wait();
    }
    return {values.data_ptr<double>(), values.data_ptr<double>() + world};
  }
};

}  // namespace mm::bench
