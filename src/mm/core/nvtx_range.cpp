#include "mm/core/nvtx_range.h"

#ifdef MM_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace mm {

#ifdef MM_HAVE_NVTX
NvtxRange::NvtxRange(const char* name) { nvtxRangePushA(name); }
NvtxRange::~NvtxRange() { nvtxRangePop(); }
bool nvtx_available() { return true; }
#else
NvtxRange::NvtxRange(const char*) {}
NvtxRange::~NvtxRange() {}
bool nvtx_available() { return false; }
#endif

}  // namespace mm
