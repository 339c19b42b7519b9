// Two training runs' checkpoints compared tensor by tensor, for the tests that prove a parallel
// layout equal to one process (VLM and Wan runs alike).
#pragma once
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <iostream>

#include "mm/core/safetensors.h"

namespace mm::testing {

// ||a - b|| / ||a||, in fp64.
inline double relative_error(const at::Tensor& a, const at::Tensor& b) {
  const auto x = a.to(torch::kDouble), y = b.to(torch::kDouble);
  return ((x - y).norm() / x.norm().clamp_min(1e-12)).item<double>();
}

// Every tensor of checkpoint b within `bound` (relative_error) of a's, with the same names; the
// largest difference printed and returned.
inline double expect_checkpoints_within(const std::filesystem::path& a_dir, const std::filesystem::path& b_dir,
                                        double bound) {
  const auto a = Checkpoint::open(a_dir);
  const auto b = Checkpoint::open(b_dir);
  EXPECT_EQ(a.names(), b.names());
  double worst = 0;
  for (const auto& name : a.names()) {
    if (!b.contains(name)) continue;
    const double err = relative_error(a.tensor(name), b.tensor(name));
    EXPECT_LE(err, bound) << name;
    worst = std::max(worst, err);
  }
  std::cout << "largest relative weight difference to one process: " << worst << "\n";
  return worst;
}

}  // namespace mm::testing
