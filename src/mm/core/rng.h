// The process's random streams, captured and restored so a resumed run draws the same numbers
// (dropout masks, sampling) as the uninterrupted one.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace mm {

struct RngState {
  at::Tensor cpu;                 // [N] uint8: the default CPU generator's get_state()
  std::vector<at::Tensor> cuda;   // one [M] uint8 state per visible CUDA device (empty without)

  // "rng.cpu", "rng.cuda.<i>" (for rng.safetensors).
  std::vector<std::pair<std::string, at::Tensor>> to_tensors() const;
  // Inverse of to_tensors; an unknown or missing name is an error that names it.
  static RngState from_tensors(const std::vector<std::pair<std::string, at::Tensor>>& tensors);
};

RngState capture_rng_state();
// Sets every generator captured in `state`. A state saved with more CUDA devices than are
// visible now restores the visible ones and warns; fewer restores what there is.
void restore_rng_state(const RngState& state);

}  // namespace mm
