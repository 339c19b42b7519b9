// core/host_to_device.h: host data onto the step's device without a host sync. On the CPU (what CI
// has) the helpers must be exactly the conversions they replace; on CUDA, the GPU check's parity
// checks go through them (every model input, index and position table), and its
// qwen2_5_vl.step_host_syncs check counts the waits that remain in a training step.
#include <torch/cuda.h>
#include <torch/torch.h>

#include "mm/core/host_to_device.h"
#include "testing.h"

namespace {

const c10::Device kCpu(c10::kCPU);

TEST(HostToDevice, OnTheCpuATensorIsReturnedAsItIs) {
  const auto t = torch::arange(6, torch::kFloat32).view({2, 3});
  const auto same = mm::to_device_async(t, kCpu);
  EXPECT_TRUE(same.is_same(t));  // no copy: the CPU path is the one it was
  EXPECT_FALSE(mm::to_device_async(at::Tensor(), kCpu).defined());
}

TEST(HostToDevice, ValuesBecomeATensorOfTheAskedType) {
  const std::vector<int64_t> values = {3, -1, 0, 7, int64_t{1} << 40};
  const auto longs = mm::host_values_on(values, kCpu);
  EXPECT_EQ(longs.scalar_type(), at::kLong);
  EXPECT_TRUE(torch::equal(longs, torch::tensor(values, torch::kLong)));
  const std::vector<int64_t> lengths = {0, 5, 9, 12};
  const auto ints = mm::host_values_on(lengths, kCpu, at::kInt);
  EXPECT_EQ(ints.scalar_type(), at::kInt);
  EXPECT_TRUE(torch::equal(ints, torch::tensor({0, 5, 9, 12}, torch::kInt32)));
  const auto none = mm::host_values_on({}, kCpu);
  EXPECT_EQ(none.numel(), 0);
  EXPECT_EQ(none.dim(), 1);
}

// Where a GPU is visible (not in CI): the copies arrive, and the pinned buffers they came from may
// be dropped at once (the caching host allocator keeps them until the copy ran).
TEST(HostToDevice, OnAGpuTheCopiesArriveAndOrderAfterEarlierWork) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU: gpu_check's parity checks run this on CUDA";
  const c10::Device cuda(c10::kCUDA, 0);
  std::vector<int64_t> values(1 << 16);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int64_t>(i * 3);
  auto on_gpu = mm::host_values_on(values, cuda);
  values.assign(values.size(), -1);  // the host vector is free to change once the call returned
  const auto host = torch::rand({257, 33});
  const auto moved = mm::to_device_async(host, cuda);
  EXPECT_TRUE(torch::equal(on_gpu.cpu(), torch::arange(int64_t{1} << 16, torch::kLong) * 3));
  EXPECT_TRUE(torch::equal(moved.cpu(), host));
}

}  // namespace
