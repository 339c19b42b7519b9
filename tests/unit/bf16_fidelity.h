// The bf16 fidelity check shared by the Qwen-VL model tests: mmtrain's bf16 logits may stray from
// transformers' fp32 logits no further than transformers' own bf16 logits do (the oracle records
// both, "logits" and "logits_bf16", from one checkpoint). On the CPU the two bf16 forwards run the
// same kernels and agree bit for bit, so any operation that rounds differently from the
// reference (a matmul for its Conv3d, a norm or rotary in the wrong dtype) shows here.
#pragma once
#include <iostream>
#include <string>

#include "model_cases.h"

namespace mm::testing {

struct LogitErrors {
  double max = 0;
  double mean = 0;
};

inline LogitErrors logit_errors(const torch::Tensor& logits, const torch::Tensor& reference) {
  const auto diff = (logits.to(torch::kDouble) - reference.to(torch::kDouble)).abs();
  return {diff.max().item<double>(), diff.mean().item<double>()};
}

inline void expect_bf16_no_worse_than_transformers(QwenVLForConditionalGenerationImpl& model,
                                                   const SafetensorsFile& cases, const std::string& label) {
  torch::NoGradGuard no_grad;
  for (const std::string c : {"text", "image_video"}) {
    const auto theirs = field(cases, c, "logits_bf16");
    ASSERT_TRUE(theirs.defined()) << c << ": the oracle recorded no bf16 logits";
    const auto reference = field(cases, c, "logits");
    const auto logits = model.forward(inputs_of(cases, c));
    ASSERT_EQ(logits.scalar_type(), torch::kBFloat16) << c;
    const auto ours = logit_errors(logits, reference);
    const auto reference_error = logit_errors(theirs, reference);
    const double apart = max_abs_diff(logits.to(torch::kFloat32), theirs);
    std::cout << "[ bf16 ] " << label << ", " << c << ": error vs fp32 max " << ours.max << " mean " << ours.mean
              << " (transformers bf16: max " << reference_error.max << " mean " << reference_error.mean
              << "); mmtrain bf16 vs transformers bf16: " << apart << std::endl;
    // A relative 1e-6 absorbs the double sums only; a real rounding difference is orders larger.
    EXPECT_LE(ours.max, reference_error.max * (1 + 1e-6)) << c;
    EXPECT_LE(ours.mean, reference_error.mean * (1 + 1e-6)) << c;
  }
}

}  // namespace mm::testing
