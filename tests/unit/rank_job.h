// What a multi-process test's worker (rank_processes.h) starts with: the torchrun variables, the
// rendezvous (a minute to meet) and a Gloo group of every rank.
#pragma once
#include <chrono>
#include <cstdint>
#include <vector>

#include "mm/dist/process_group.h"

namespace mm::testing {

struct RankJob {
  dist::DistEnv env;
  dist::Rendezvous job;
  c10::intrusive_ptr<c10d::Backend> world;  // every rank, named "world"
};

inline RankJob join_rank_job() {
  RankJob out{dist::DistEnv::from_env(), {}, {}};
  dist::RendezvousOptions options;
  options.timeout = std::chrono::seconds(60);
  out.job = dist::rendezvous(out.env, options);
  std::vector<int64_t> everyone;
  for (int64_t i = 0; i < out.env.world_size; ++i) everyone.push_back(i);
  out.world = dist::new_gloo_group(out.job, everyone, "world");
  return out;
}

}  // namespace mm::testing
