// Skipping the random initialisation of parameters that a checkpoint is about to overwrite.
// Building a model initialises every parameter (kaiming, normal) before from_pretrained copies
// the checkpoint over it: for a 1.3B-parameter model that is seconds of single-threaded random
// numbers and a write of every page, for a 72B one minutes. While a SkipParameterInit lives on
// a thread, the modules of mm/nn built there (Linear, embedding()) leave their parameters
// uninitialised (torch::empty: pages untouched until the load writes them once).
// Only for a module that a strict load_weights fills next: it fails unless every parameter is in
// the checkpoint, so no uninitialised value survives. Modules built outside the guard, and
// small ones that init cheaply (norms, the patch convolutions), are unchanged.
#pragma once
#include <torch/nn/modules/embedding.h>

#include <cstdint>

#include "mm/nn/weights.h"

namespace mm {

class SkipParameterInit {
 public:
  SkipParameterInit();
  ~SkipParameterInit();
  SkipParameterInit(const SkipParameterInit&) = delete;
  SkipParameterInit& operator=(const SkipParameterInit&) = delete;

 private:
  bool previous_;
};

// True while a SkipParameterInit lives on this thread.
bool parameter_init_skipped();

// torch::nn::Embedding(num, dim), its weight N(0, 1) as torch initialises it, or left
// uninitialised under SkipParameterInit.
torch::nn::Embedding embedding(int64_t num_embeddings, int64_t embedding_dim);

// Saves the default CPU generator's state and restores it when it goes: whatever a libtorch
// module we do not own draws while initialising (Conv3d, ...) leaves the stream where it was.
class KeepCpuRandomState {
 public:
  KeepCpuRandomState();
  ~KeepCpuRandomState();
  KeepCpuRandomState(const KeepCpuRandomState&) = delete;
  KeepCpuRandomState& operator=(const KeepCpuRandomState&) = delete;

 private:
  at::Tensor state_;
};

// What every from_pretrained builds its model with: `make()` run directly in `dtype`
// (DefaultDtypeGuard: never in fp32 first), without random initialisation (the strict
// load_weights that must follow fills every parameter once), leaving the random stream as it was
// (loading a model never shifts a seeded run's draws), then moved to `device` while its host
// memory is still untouched: the load writes each tensor once, on its device, and the host holds
// no copy of the model, only the mapped file's pages of the tensor being copied.
template <typename Make>
auto build_for_loading(torch::Dtype dtype, const c10::Device& device, Make&& make) {
  auto module = [&] {
    KeepCpuRandomState random_stream;
    DefaultDtypeGuard in_dtype(dtype);
    SkipParameterInit overwritten_next;
    return make();
  }();
  if (!device.is_cpu()) module->to(device);
  return module;
}

}  // namespace mm
