// The sparse mixture-of-experts block of Qwen3-MoE (and the Qwen3-VL-MoE / Qwen3.5-MoE language
// models that reuse it): a router picks the top-k of num_experts SwiGLU experts per token and
// the token's output is their weighted sum (Qwen3.5-MoE adds a gated shared expert). Plus the Switch-Transformer load-balancing loss
// over the routers' logits, as transformers' load_balancing_loss_func computes it.
//
// Parameter names are the published checkpoints': gate.weight [num_experts, hidden] and
// experts.E.{gate,up,down}_proj.weight. The experts are a ModuleList of GatedMLPs rather than
// transformers 5's fused [num_experts, ...] tensors because (1) the hub checkpoints and what
// transformers 5.17's save_pretrained writes are per-expert, so they load by name with no
// adapter; (2) sharding over experts is holding a contiguous range of the list (expert
// parallelism) or dim-0-sharding each small weight (FSDP), with no tensor surgery; (3) LoRA
// attaches to each expert's Linears as to any other.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <string>
#include <vector>

#include "mm/nn/gated_mlp.h"
#include "mm/nn/linear.h"
#include "mm/nn/load_balancing.h"

namespace mm {

struct MoEOptions {
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // of each expert (HF moe_intermediate_size)
  int64_t num_experts = 0;
  int64_t top_k = 0;              // HF num_experts_per_tok
  bool norm_topk_prob = false;    // renormalise the k chosen probabilities to sum to 1
  std::string activation = "silu";
  // Qwen3.5-MoE's shared expert (HF shared_expert_intermediate_size; 0: none): an MLP every token
  // passes through beside its routed experts, scaled by sigmoid(shared_expert_gate x).
  int64_t shared_intermediate_size = 0;
};

// What the router chose for each of `tokens` tokens.
struct MoERouting {
  torch::Tensor logits;   // [tokens, num_experts], the input's dtype (what the aux loss reads)
  torch::Tensor probs;    // [tokens, num_experts] fp32 softmax of the logits
  torch::Tensor weights;  // [tokens, top_k], the input's dtype
  torch::Tensor experts;  // [tokens, top_k] int64
};

class SparseMoeBlockImpl;

// How routed tokens reach their experts and come back: flat [tokens, hidden] and the routing ->
// [tokens, hidden], each token's weighted sum of its experts' outputs. Set from outside, as
// BlockRunner is: expert parallelism (parallel/expert_parallel.h) sends the tokens to the ranks
// holding their experts; unset, the block runs every expert itself (run_local_experts).
using ExpertDispatch =
    std::function<torch::Tensor(SparseMoeBlockImpl& block, const torch::Tensor& flat, const MoERouting& routing)>;

// The assignments (token * top_k + slot) of a routing sorted by expert, stable so that each
// expert's tokens keep their order, as both dispatches group them.
struct ExpertOrder {
  torch::Tensor token_of;              // [tokens * top_k] int64: the token of each sorted assignment
  torch::Tensor weight_of;             // [tokens * top_k]: its routing weight
  std::vector<int64_t> count;          // [num_experts] assignments per expert (host)
};
ExpertOrder sort_by_expert(const MoERouting& routing, int64_t num_experts);

class SparseMoeBlockImpl : public torch::nn::Module {
 public:
  explicit SparseMoeBlockImpl(const MoEOptions& options);

  // Softmax over the experts in fp32, top-k, optional renormalisation (as transformers'
  // Qwen3MoeTopKRouter). x: [tokens, hidden].
  MoERouting route(const torch::Tensor& x);

  // x: [..., hidden] -> [..., hidden]. Tokens are grouped per expert (one sort), each expert runs
  // on its contiguous run of rows and the weighted outputs are added back in ascending expert
  // order as transformers does (run_local_experts, or `dispatch` when set), so the work is
  // tokens * top_k rows, never a dense [tokens, experts, hidden]. Costs one device-to-host copy
  // of the per-expert counts.
  // Keeps this call's router logits for router_logits(). `balance`: a training forward's
  // load-balancing loss (nn/load_balancing.h), told this layer's routing and attached to its output.
  torch::Tensor forward(const torch::Tensor& x, LoadBalancingLoss* balance = nullptr);

  // Every routed token through its experts here: flat [tokens, hidden] -> [tokens, hidden].
  torch::Tensor run_local_experts(const torch::Tensor& flat, const MoERouting& routing);
  // Expert e's MLP on rows [n, hidden] -> [n, hidden] (unweighted).
  torch::Tensor run_expert(int64_t e, const torch::Tensor& rows);

  ExpertDispatch dispatch;

  // [tokens, num_experts] of the last forward (tokens = the flattened leading dims of x).
  // A member rather than a return value so that the block fits BlockRunner's tensor -> tensor
  // hook. Under a recomputing runner it holds the no-grad first pass's logits (no gradient for
  // the aux loss), which Qwen3ForCausalLM refuses.
  const torch::Tensor& router_logits() const { return router_logits_; }
  const MoEOptions& options() const { return options_; }

  Linear gate{nullptr};                  // [num_experts, hidden], no bias
  torch::nn::ModuleList experts{nullptr};  // num_experts GatedMLPs (no biases)
  GatedMLP shared_expert{nullptr};         // with options.shared_intermediate_size only
  Linear shared_expert_gate{nullptr};      // [1, hidden], no bias; with the shared expert

 private:
  MoEOptions options_;
  torch::Tensor router_logits_;
};
TORCH_MODULE(SparseMoeBlock);

// The auxiliary load-balancing loss of transformers' load_balancing_loss_func:
// num_experts * sum_e f_e * P_e, where f_e is the share of top-k assignments that went to
// expert e and P_e its mean router probability, both over every layer's tokens.
// router_logits: one [batch * seq, num_experts] per sparse layer. attention_mask: [batch, seq]
// with 0 for padding (excluded from both means), or undefined. Returns an fp32 scalar; 0 for no
// layers.
torch::Tensor load_balancing_loss(const std::vector<torch::Tensor>& router_logits, int64_t num_experts,
                                  int64_t top_k, const torch::Tensor& attention_mask = {});

}  // namespace mm
