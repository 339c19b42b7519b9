#include "mm/core/host_to_device.h"

#include <ATen/ATen.h>

namespace mm {

at::Tensor to_device_async(const at::Tensor& tensor, const c10::Device& device) {
  if (!tensor.defined() || tensor.device() == device) return tensor;
  if (!device.is_cuda() || !tensor.device().is_cpu()) return tensor.to(device);
  // pin_memory() returns a pinned tensor as it is and copies a pageable one (a host memcpy).
  return tensor.pin_memory().to(device, /*non_blocking=*/true);
}

at::Tensor host_values_on(const std::vector<int64_t>& values, const c10::Device& device, at::ScalarType dtype) {
  const auto count = static_cast<int64_t>(values.size());
  // Written straight into pinned memory (in `dtype`) when the values go to a GPU.
  auto host = at::empty({count}, at::TensorOptions().dtype(dtype).pinned_memory(device.is_cuda()));
  if (count > 0)
    host.copy_(at::from_blob(const_cast<int64_t*>(values.data()), {count}, at::TensorOptions().dtype(at::kLong)));
  return to_device_async(host, device);
}

}  // namespace mm
