// Host data onto the device a step computes on, without making the host wait for the GPU.
// `tensor.to(cuda)` from ordinary (pageable) host memory synchronizes the stream: the host stops
// queueing kernels until every one queued before has run, then the GPU idles while the host
// queues the next ones. Inside a training step that happens for every index tensor, position
// table and batch tensor moved that way. Copied from pinned memory with non_blocking instead, the
// copy is queued on the current stream behind the work before it and the host goes on; the pinned
// buffer is kept by torch's caching host allocator until the copy has run. On the CPU (and for a
// tensor already on `device`) these are the plain conversions, so the CPU path is unchanged.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <vector>

namespace mm {

// `tensor` on `device` (its dtype kept).
at::Tensor to_device_async(const at::Tensor& tensor, const c10::Device& device);

// `values` as a 1-D tensor of `dtype` on `device` (index lists, cumulative lengths).
at::Tensor host_values_on(const std::vector<int64_t>& values, const c10::Device& device,
                          at::ScalarType dtype = at::kLong);

}  // namespace mm
