#include "mm/core/rng.h"

#include <torch/torch.h>

#include <ATen/Context.h>
#include <mutex>

#include "mm/core/error.h"
#include "mm/core/log.h"

namespace mm {
namespace {

int cuda_devices() { return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0; }

at::Generator cuda_generator(int index) {
  return at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index)));
}

// Generators are shared with every thread that draws; torch locks them the same way.
at::Tensor get_state(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_state(at::Generator gen, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state.to(torch::kCPU, torch::kUInt8).contiguous());
}

}  // namespace

RngState capture_rng_state() {
  RngState s;
  s.cpu = get_state(at::detail::getDefaultCPUGenerator());
  for (int i = 0; i < cuda_devices(); ++i) s.cuda.push_back(get_state(cuda_generator(i)));
  return s;
}

void restore_rng_state(const RngState& state) {
  MM_CHECK(state.cpu.defined(), "rng state: the CPU generator state is missing");
  set_state(at::detail::getDefaultCPUGenerator(), state.cpu);
  const int visible = cuda_devices();
  if (static_cast<int>(state.cuda.size()) > visible)
    log::warn("rng state holds ", state.cuda.size(), " CUDA generator(s) but ", visible,
              " device(s) are visible: restoring ", visible);
  for (int i = 0; i < visible && i < static_cast<int>(state.cuda.size()); ++i)
    set_state(cuda_generator(i), state.cuda[i]);
}

std::vector<std::pair<std::string, at::Tensor>> RngState::to_tensors() const {
  std::vector<std::pair<std::string, at::Tensor>> out{{"rng.cpu", cpu}};
  for (size_t i = 0; i < cuda.size(); ++i) out.emplace_back("rng.cuda." + std::to_string(i), cuda[i]);
  return out;
}

RngState RngState::from_tensors(const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  RngState s;
  std::map<int, at::Tensor> cuda;
  for (const auto& [name, t] : tensors) {
    MM_CHECK(t.scalar_type() == torch::kUInt8 && t.dim() == 1, "rng state: tensor ", name,
             " must be a 1-D uint8 tensor, got ", t.scalar_type(), " ", t.sizes());
    const std::string prefix = "rng.cuda.";
    if (name == "rng.cpu") {
      s.cpu = t;
    } else if (name.rfind(prefix, 0) == 0) {
      int index = -1;
      try {
        size_t used = 0;
        index = std::stoi(name.substr(prefix.size()), &used);
        if (used != name.size() - prefix.size()) index = -1;
      } catch (const std::exception&) {
      }
      MM_CHECK(index >= 0, "rng state: tensor ", name, " has no device index");
      cuda[index] = t;
    } else {
      fail("rng state: unexpected tensor ", name, " (expected rng.cpu, rng.cuda.<i>)");
    }
  }
  MM_CHECK(s.cpu.defined(), "rng state: tensor rng.cpu is missing");
  for (int i = 0; i < static_cast<int>(cuda.size()); ++i) {
    MM_CHECK(cuda.count(i), "rng state: tensor rng.cuda.", i, " is missing (",
             cuda.size(), " CUDA states given)");
    s.cuda.push_back(cuda[i]);
  }
  return s;
}

}  // namespace mm
