// The dtype that precision-sensitive steps (norms, the delta rule's state and decay) compute in:
// fp32 for fp32, bf16 and fp16 activations, as the references do; fp64 stays fp64, so a model run
// in fp64 (the tests that prove two paths equal beyond fp32 rounding) loses nothing on the way.
#pragma once
#include <c10/core/ScalarType.h>

namespace mm {

inline c10::ScalarType at_least_fp32(c10::ScalarType dtype) {
  return dtype == c10::ScalarType::Double ? c10::ScalarType::Double : c10::ScalarType::Float;
}

}  // namespace mm
