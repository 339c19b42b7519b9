// mmtrain with fault injection, for the tests only: the same command line as mmtrain, with the
// product's test hooks set from the environment (the product itself reads no fault variables).
//   MM_FAULT_KILL_AT_STEP=N [MM_FAULT_KILL_RANK=r]  a real SIGKILL right after step N is logged,
//                                                   in every process or only in rank r
//   MM_FAULT_EXTRACT_STOP_AFTER_SHARDS=N            `extract` exits (status 3) after writing N shards
//                                                   in this run, as if killed
#include <csignal>
#include <cstdlib>

#include "commands.h"
#include "mm/core/log.h"
#include "mm/tasks/feature_extraction.h"
#include "mm/train/trainer.h"

int main(int argc, char** argv) {
  if (const char* step = std::getenv("MM_FAULT_KILL_AT_STEP")) {
    const int64_t kill_at = std::atoll(step);
    const char* rank = std::getenv("MM_FAULT_KILL_RANK");
    const int64_t kill_rank = rank ? std::atoll(rank) : -1;
    mm::set_after_step_hook([kill_at, kill_rank](int64_t done, int64_t this_rank) {
      if (done != kill_at || (kill_rank >= 0 && this_rank != kill_rank)) return;
      mm::log::warn("MM_FAULT_KILL_AT_STEP=", kill_at, ": killing this process (SIGKILL)");
      std::raise(SIGKILL);
    });
  }
  if (const char* shards = std::getenv("MM_FAULT_EXTRACT_STOP_AFTER_SHARDS")) {
    const int64_t stop_after = std::atoll(shards);
    mm::set_after_extract_shard_hook([stop_after](int64_t written) {
      if (written != stop_after) return;
      mm::log::warn("MM_FAULT_EXTRACT_STOP_AFTER_SHARDS=", stop_after, ": stopping here");
      std::_Exit(3);
    });
  }
  return mm::cli::run(argc, argv);
}
