// Where a command computes: `--device` and `train.device`. "auto" is the GPU when libtorch sees
// one (the LOCAL_RANK-th, so the ranks of a node take one each), else the CPU; "cpu"; "cuda"
// (the LOCAL_RANK-th GPU) or "cuda:N". Asking for a GPU that is not there is an error naming
// `where`, before anything is loaded. Resolving a GPU also makes it the process's current CUDA
// device, so a rank's work lands on its own GPU even where no device is named.
#pragma once
#include <c10/core/Device.h>

#include <string>

namespace mm {

c10::Device resolve_device(const std::string& name, const std::string& where);

// Whether `name` is one of the accepted forms (for config parsing, without resolving).
bool is_device_name(const std::string& name);

// The CUDA runtime's name of GPU `index` ("NVIDIA H200"), "" when no CUDA runtime is loaded or
// the call fails. Looked up in the process (libtorch_cuda loads the runtime), so the build needs
// no CUDA headers.
std::string cuda_device_name(int index);

}  // namespace mm
