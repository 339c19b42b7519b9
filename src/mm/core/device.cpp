#include "mm/core/device.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <dlfcn.h>
#include <torch/cuda.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "mm/core/error.h"

namespace mm {
namespace {

// "cuda:N" -> N; -1 for "cuda"; -2 for anything else.
int cuda_index(const std::string& name) {
  if (name == "cuda") return -1;
  if (name.rfind("cuda:", 0) != 0 || name.size() == 5) return -2;
  for (size_t i = 5; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return -2;
  return name.size() > 8 ? -2 : std::stoi(name.substr(5));
}

int local_rank() {
  const char* value = std::getenv("LOCAL_RANK");
  if (!value || !*value) return 0;
  try {
    return std::max(0, std::stoi(value));
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

bool is_device_name(const std::string& name) { return name == "auto" || name == "cpu" || cuda_index(name) >= -1; }

c10::Device resolve_device(const std::string& name, const std::string& where) {
  MM_CHECK(is_device_name(name), where, ": '", name, "' is not a device (auto, cpu, cuda, cuda:N)");
  if (name == "cpu") return c10::Device(c10::kCPU);
  const bool available = torch::cuda::is_available();
  if (name == "auto" && !available) return c10::Device(c10::kCPU);
  MM_CHECK(available, where, ": '", name, "' needs a CUDA GPU, and libtorch sees none (torch::cuda::is_available() ",
           "is false); use cpu or auto");
  const int count = static_cast<int>(torch::cuda::device_count());
  int index = cuda_index(name);
  if (index < 0) index = local_rank() % count;
  MM_CHECK(index < count, where, ": '", name, "': only ", count, " CUDA device(s) are visible");
  const c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
  // The process's current device (cudaSetDevice, through libtorch's device guard, so the build
  // needs no CUDA headers): what CUDA work made without an explicit device uses (library
  // handles, streams, later NCCL's communicators), bound before anything else touches CUDA.
  c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->setDevice(device);
  return device;
}

std::string use_expandable_segments_by_default() {
  for (const char* name : {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"})
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') return value;
  ::setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", /*overwrite=*/0);
  return "expandable_segments:True";
}

std::string cuda_device_name(int index) {
  // cudaError_t cudaGetDeviceProperties(cudaDeviceProp*, int): the struct's first member is
  // char name[256]; it is about 1 KB, the buffer is far larger than any version's.
  using GetProperties = int (*)(void*, int);
  void* symbol = dlsym(RTLD_DEFAULT, "cudaGetDeviceProperties_v2");
  if (!symbol) symbol = dlsym(RTLD_DEFAULT, "cudaGetDeviceProperties");
  if (!symbol || index < 0) return "";
  std::vector<char> properties(16384, 0);
  if (reinterpret_cast<GetProperties>(symbol)(properties.data(), index) != 0) return "";
  return std::string(properties.data(), strnlen(properties.data(), 256));
}

}  // namespace mm
