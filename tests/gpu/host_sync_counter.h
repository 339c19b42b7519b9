// Counts the times the host waits for the GPU inside a scope, and where each wait comes from:
// torch's sync debug mode (Python's torch.cuda.set_sync_debug_mode("warn")) makes every
// synchronizing CUDA call (a copy to or from pageable memory, .item(), nonzero, a boolean index,
// a stream synchronize) raise a warning, which this counter takes, with the innermost mmtrain
// function of its backtrace. The GPU check runs a training step inside one: the step should wait
// only where it reads its results back.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace mm::gpu_check {

class HostSyncCounter {
 public:
  HostSyncCounter();  // on from here (for this thread's warnings)
  ~HostSyncCounter();  // off again, the previous handler back
  HostSyncCounter(const HostSyncCounter&) = delete;
  HostSyncCounter& operator=(const HostSyncCounter&) = delete;

  // Whether this build can count (it was compiled with the CUDA headers).
  static bool available();
  int64_t total() const;
  // Count by site: the signature of the innermost mm:: function of the backtrace ("?" when none
  // is named, "backward" for a wait in autograd's backward pass).
  const std::map<std::string, int64_t>& sites() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace mm::gpu_check
