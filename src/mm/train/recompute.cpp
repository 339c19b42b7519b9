#include "mm/train/recompute.h"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <optional>


namespace mm {
namespace {

// The state a block's forward depends on beyond its input and parameters.
struct ReplayState {
  at::Tensor cpu_rng;
  std::optional<c10::Device> cuda_device;
  at::Tensor cuda_rng;
  bool autocast_cpu = false, autocast_cuda = false;
  at::ScalarType autocast_cpu_dtype = at::kBFloat16, autocast_cuda_dtype = at::kHalf;

  static ReplayState capture(const torch::Tensor& input) {
    ReplayState s;
    s.cpu_rng = rng_state(at::detail::getDefaultCPUGenerator());
    if (input.is_cuda()) {
      s.cuda_device = input.device();
      s.cuda_rng = rng_state(at::globalContext().defaultGenerator(input.device()));
    }
    s.autocast_cpu = at::autocast::is_autocast_enabled(at::kCPU);
    s.autocast_cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
    s.autocast_cuda = at::autocast::is_autocast_enabled(at::kCUDA);
    s.autocast_cuda_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
    return s;
  }

  // Makes this state current; returns what was current so it can be put back.
  ReplayState install() const {
    ReplayState previous;
    previous.cpu_rng = rng_state(at::detail::getDefaultCPUGenerator());
    set_rng_state(at::detail::getDefaultCPUGenerator(), cpu_rng);
    if (cuda_device) {
      auto gen = at::globalContext().defaultGenerator(*cuda_device);
      previous.cuda_device = cuda_device;
      previous.cuda_rng = rng_state(gen);
      set_rng_state(gen, cuda_rng);
    }
    previous.autocast_cpu = at::autocast::is_autocast_enabled(at::kCPU);
    previous.autocast_cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
    previous.autocast_cuda = at::autocast::is_autocast_enabled(at::kCUDA);
    previous.autocast_cuda_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
    at::autocast::set_autocast_enabled(at::kCPU, autocast_cpu);
    at::autocast::set_autocast_dtype(at::kCPU, autocast_cpu_dtype);
    at::autocast::set_autocast_enabled(at::kCUDA, autocast_cuda);
    at::autocast::set_autocast_dtype(at::kCUDA, autocast_cuda_dtype);
    return previous;
  }

 private:
  static at::Tensor rng_state(at::Generator gen) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    return gen.get_state();
  }
  static void set_rng_state(at::Generator gen, const at::Tensor& state) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(state);
  }
};

struct Checkpointed : torch::autograd::Function<Checkpointed> {
  // `anchor` is an empty tensor that requires grad: it makes the output require grad (and so
  // this node run in backward) even when `input` does not, so the parameters still get theirs.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor input, torch::Tensor anchor,
                               const BlockFn* run) {
    (void)anchor;
    ctx->saved_data["state"] = c10::IValue::make_capsule(c10::make_intrusive<StateHolder>(ReplayState::capture(input)));
    ctx->saved_data["run"] = c10::IValue::make_capsule(c10::make_intrusive<RunHolder>(*run));
    ctx->saved_data["input_requires_grad"] = input.requires_grad();
    ctx->save_for_backward({input});
    torch::NoGradGuard no_grad;
    // Autocast would cache the low-precision copies of the weights made here, without autograd
    // history, and hand them to the recompute, cutting the weights off from their gradients.
    const bool cache = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_cache_enabled(false);
    try {
      auto output = (*run)(input);
      at::autocast::set_autocast_cache_enabled(cache);
      return output;
    } catch (...) {
      at::autocast::set_autocast_cache_enabled(cache);
      throw;
    }
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto state_holder = c10::static_intrusive_pointer_cast<StateHolder>(ctx->saved_data["state"].toCapsule());
    const auto run_holder = c10::static_intrusive_pointer_cast<RunHolder>(ctx->saved_data["run"].toCapsule());
    const ReplayState& state = state_holder->state;
    const BlockFn& run = run_holder->run;
    const bool input_requires_grad = ctx->saved_data["input_requires_grad"].toBool();
    auto input = ctx->get_saved_variables()[0].detach().requires_grad_(input_requires_grad);

    const ReplayState previous = state.install();
    torch::Tensor output;
    try {
      torch::AutoGradMode grad(true);
      output = run(input);
    } catch (...) {
      previous.install();
      throw;
    }
    previous.install();
    if (output.requires_grad()) torch::autograd::backward({output}, {grad_outputs[0]});
    return {input_requires_grad ? input.grad() : torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }

  struct StateHolder : torch::CustomClassHolder {
    explicit StateHolder(ReplayState s) : state(std::move(s)) {}
    ReplayState state;
  };
  struct RunHolder : torch::CustomClassHolder {
    explicit RunHolder(BlockFn r) : run(std::move(r)) {}
    BlockFn run;
  };
};

}  // namespace

BlockRunner recompute_runner() {
  return [](torch::nn::Module& block, const BlockFn& run, const torch::Tensor& input) -> torch::Tensor {
    if (!torch::GradMode::is_enabled()) return run(input);  // inference: nothing to save anyway
    bool trainable = input.requires_grad();
    for (const auto& p : block.parameters()) trainable = trainable || p.requires_grad();
    if (!trainable) return run(input);  // a frozen block over a frozen input: no backward at all
    auto anchor = torch::empty({0}, input.options().requires_grad(true));
    return Checkpointed::apply(input, anchor, &run);
  };
}

}  // namespace mm
