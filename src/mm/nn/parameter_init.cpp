#include "mm/nn/parameter_init.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <mutex>

namespace mm {
namespace {
thread_local bool skip_init = false;
}  // namespace

SkipParameterInit::SkipParameterInit() : previous_(skip_init) { skip_init = true; }
SkipParameterInit::~SkipParameterInit() { skip_init = previous_; }

bool parameter_init_skipped() { return skip_init; }

KeepCpuRandomState::KeepCpuRandomState() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  state_ = generator.get_state();
}

KeepCpuRandomState::~KeepCpuRandomState() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state_);
}

torch::nn::Embedding embedding(int64_t num_embeddings, int64_t embedding_dim) {
  torch::nn::EmbeddingOptions options(num_embeddings, embedding_dim);
  // A given _weight is registered as the parameter as is; without one, reset() draws N(0, 1).
  if (skip_init) options._weight(torch::empty({num_embeddings, embedding_dim}));
  return torch::nn::Embedding(options);
}

}  // namespace mm
