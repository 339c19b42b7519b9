// NVTX ranges: named spans of host time (forward, backward, optimizer, collectives) that Nsight
// Systems shows above the GPU kernels they launched. Built on NVIDIA's header-only nvtx3, which
// costs one pointer check per range when no profiler is attached (a tool attaches through
// NVTX_INJECTION64_PATH, as `nsys profile` does). Where the build found no nvtx3 headers the ranges
// are empty.
#pragma once

namespace mm {

class NvtxRange {
 public:
  explicit NvtxRange(const char* name);  // `name` is copied by the tool, if any
  ~NvtxRange();
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

// Whether this build emits NVTX ranges (nvtx3 headers found at configure time).
bool nvtx_available();

}  // namespace mm
