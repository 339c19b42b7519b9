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

// Turns on the CUDA caching allocator's expandable segments (PYTORCH_CUDA_ALLOC_CONF=
// expandable_segments:True) unless the user configured the allocator (PYTORCH_CUDA_ALLOC_CONF
// or PYTORCH_ALLOC_CONF set): batches of varying shapes (packing, images of many sizes)
// otherwise fragment its fixed-size segments until a step runs out of memory with gigabytes
// free. Called first thing in the CLI, before anything initialises CUDA. Returns the setting now
// in force ("" when none).
std::string use_expandable_segments_by_default();

}  // namespace mm
