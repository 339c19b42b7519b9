// A stand-in profiler for the NVTX tests: NVTX loads it through NVTX_INJECTION64_PATH, as it
// loads Nsight Systems' injection library, and it records every range pushed and popped.
// mm_nvtx_recorded() returns them as "+name" / "-" separated by spaces.
#include <nvtx3/nvToolsExt.h>

#include <mutex>
#include <string>

namespace {

std::mutex lock;
std::string events;

int NVTX_API push(const char* message) {
  const std::lock_guard<std::mutex> guard(lock);
  events.push_back('+');
  events.append(message ? message : "");
  events.push_back(' ');
  return 0;
}

int NVTX_API pop() {
  const std::lock_guard<std::mutex> guard(lock);
  events += "- ";
  return 0;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (callbacks == nullptr || !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) ||
      size <= NVTX_CBID_CORE_RangePop)
    return 0;
  *table[NVTX_CBID_CORE_RangePushA] = reinterpret_cast<NvtxFunctionPointer>(&push);
  *table[NVTX_CBID_CORE_RangePop] = reinterpret_cast<NvtxFunctionPointer>(&pop);
  return 1;
}

extern "C" __attribute__((visibility("default"))) const char* mm_nvtx_recorded() {
  const std::lock_guard<std::mutex> guard(lock);
  return events.c_str();
}
