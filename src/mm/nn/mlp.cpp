#include "mm/nn/mlp.h"

#include "mm/core/error.h"
#include "mm/nn/gated_mlp.h"

namespace mm {

MLPImpl::MLPImpl(int64_t hidden_size, int64_t intermediate_size, std::string activation,
                 const std::string& fc1_name, const std::string& fc2_name)
    : activation_(std::move(activation)) {
  MM_CHECK(is_supported_activation(activation_), "MLP: activation '", activation_, "' is not supported");
  fc1 = register_module(fc1_name, Linear(hidden_size, intermediate_size, /*bias=*/true));
  fc2 = register_module(fc2_name, Linear(intermediate_size, hidden_size, /*bias=*/true));
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x) { return fc2(apply_activation(activation_, fc1(x))); }

}  // namespace mm
