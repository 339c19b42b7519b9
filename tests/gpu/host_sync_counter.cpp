#include "gpu/host_sync_counter.h"

#include <c10/util/Backtrace.h>
#include <c10/util/Exception.h>

#include <sstream>

// MM_HAVE_NCCL: compiled with the CUDA headers (cmake/Torch.cmake's mm_nccl_sources), which the
// sync debug switch's header needs.
#ifdef MM_HAVE_NCCL
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace mm::gpu_check {

namespace {

// The innermost frame of `backtrace` that names an mm:: function other than this counter's,
// reduced to the function's signature. A warning raised in backward on the GPU comes from
// autograd's device thread, which buffers it and replays it here when backward() returns: its
// backtrace is the replay's, so it is counted as "backward" (where in backward it is not known).
std::string innermost_mm_frame(const std::string& backtrace) {
  std::istringstream lines(backtrace);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("autograd::Engine") != std::string::npos || line.find("replay_warnings") != std::string::npos)
      return "backward";
    const auto at = line.find("mm::");
    if (at == std::string::npos || line.find("gpu_check::") != std::string::npos) continue;
    const auto end = line.find(" + 0x", at);  // "frame #N: FUNCTION(ARGS) + 0xOFFSET (ADDRESS in LIBRARY)"
    return line.substr(at, end == std::string::npos ? std::string::npos : end - at);
  }
  return "?";
}

}  // namespace

struct HostSyncCounter::State : c10::WarningHandler {
  int64_t total = 0;
  std::map<std::string, int64_t> sites;
  c10::WarningHandler* previous = nullptr;
  void process(const c10::Warning& warning) override {
    if (warning.msg().find("synchronizing CUDA operation") == std::string::npos) {
      if (previous) previous->process(warning);
      return;
    }
    ++total;
    ++sites[innermost_mm_frame(c10::get_backtrace(/*frames_to_skip=*/1, /*maximum_number_of_frames=*/48))];
  }
};

HostSyncCounter::HostSyncCounter() : state_(std::make_unique<State>()) {
  state_->previous = c10::WarningUtils::get_warning_handler();
  c10::WarningUtils::set_warning_handler(state_.get());
#ifdef MM_HAVE_NCCL
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
#endif
}

HostSyncCounter::~HostSyncCounter() {
#ifdef MM_HAVE_NCCL
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
#endif
  c10::WarningUtils::set_warning_handler(state_->previous);
}

bool HostSyncCounter::available() {
#ifdef MM_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

int64_t HostSyncCounter::total() const { return state_->total; }
const std::map<std::string, int64_t>& HostSyncCounter::sites() const { return state_->sites; }

}  // namespace mm::gpu_check
