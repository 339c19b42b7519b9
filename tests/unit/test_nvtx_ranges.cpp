// NVTX ranges reach a profiler: with a recording stand-in loaded the way Nsight Systems is
// (NVTX_INJECTION64_PATH), one training step shows its forward, backward, clipping and optimizer
// ranges, in order and balanced.
#include <dlfcn.h>

#include <cstdlib>
#include <sstream>

#include "mm/core/nvtx_range.h"
#include "mm/train/optimizer.h"
#include "mm/train/train_step.h"
#include "testing.h"

namespace mm {
namespace {

TEST(NvtxRanges, TheTrainingStepMarksItsPhasesForAProfiler) {
#ifndef MM_NVTX_RECORDER
  GTEST_SKIP() << "built without the nvtx3 headers: the ranges are empty";
#else
  ASSERT_TRUE(nvtx_available());
  // NVTX looks for a tool at its first call in the process, which is in the step below.
  ASSERT_EQ(::setenv("NVTX_INJECTION64_PATH", MM_NVTX_RECORDER, 1), 0);
  auto w = torch::randn({4, 3}).requires_grad_(true);
  const auto x = torch::randn({3, 2});
  AdamW optimizer({{"w", w}}, AdamWConfig{});
  const std::vector<MicroBatchCounts> counts = {{2, 2, 1, 0}, {2, 2, 1, 0}};
  train_step(counts, [&](size_t, const StepTotals&) { return torch::matmul(w, x).square().sum(); }, optimizer, 1e-3, {w}, StepOptions{});

  void* recorder = ::dlopen(MM_NVTX_RECORDER, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(recorder, nullptr) << "NVTX did not load the recording tool";
  const auto recorded = reinterpret_cast<const char* (*)()>(::dlsym(recorder, "mm_nvtx_recorded"));
  ASSERT_NE(recorded, nullptr);
  const std::string events = recorded();
  EXPECT_EQ(events, "+forward - +backward - +forward - +backward - +clip_grad_norm - +optimizer - ");
  ::dlclose(recorder);
#endif
}

}  // namespace
}  // namespace mm
