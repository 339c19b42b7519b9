// The auxiliary load-balancing loss of a training forward through sparse MoE layers, collected
// as the layers run and fed back into every router in backward: also when a layer is recomputed
// in backward, where the router logits of the first pass have no autograd history.
//
// The loss is transformers' load_balancing_loss_func: num_experts * sum_e f_e * P_e, with f_e the
// share of the top-k assignments that went to expert e and P_e the mean router probability of
// e, both over every sparse layer's (unpadded) tokens. f is not differentiable, so its gradient
// with respect to layer l's probabilities of token t is the constant num_experts * C_e / R^2
// (C_e: assignments to e over all layers, R: all layers' token rows), known once the whole
// forward ran. Each layer therefore hands its output through a node that passes the output's
// gradient on and gives its probability column sums that constant as their gradient (the way
// Megatron's MoEAuxLossAutoScaler attaches its aux loss), which equals what autograd over the
// reference's formula computes, without keeping the router logits alive.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>

namespace mm {

class LoadBalancingLoss {
 public:
  // token_mask: [tokens] (the flattened [batch, seq] attention mask: 1 real, 0 padding) or
  // undefined when every token is real (packed rows).
  LoadBalancingLoss(int64_t num_experts, int64_t top_k, at::Tensor token_mask = {});

  // Called by each sparse layer with its output [tokens, hidden], its router probabilities
  // [tokens, num_experts] (fp32) and chosen experts [tokens, top_k]. Until finish(), adds the
  // layer's counts and probability sums; with grad mode on, returns `output` attached to the
  // gradient node (else `output` itself). A recomputation after finish() attaches only.
  at::Tensor attach(const at::Tensor& output, const at::Tensor& probs, const at::Tensor& chosen);

  // After the forward: the loss's value (fp32 0-dim, no autograd history) and, from now on,
  // the gradient each layer receives: `weight` = d(the loss being back-propagated) / d(aux).
  at::Tensor finish(double weight);

  int64_t layers() const;

  // Context parallelism: the sequence's tokens are spread over ranks, and `sum` adds a statistic
  // over them. finish() then adds the counts and probability sums of every rank before computing
  // the loss, so that its value and each layer's gradient are those of the whole sequence (each
  // rank's layers get the gradient of their own tokens; the ranks' gradients add up).
  void sum_over_ranks(std::function<at::Tensor(const at::Tensor&)> sum);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace mm
