#include "mm/nn/moe.h"

#include <torch/torch.h>

#include "mm/core/error.h"
#include "mm/core/host_to_device.h"
#include "mm/nn/gated_mlp.h"

namespace mm {

SparseMoeBlockImpl::SparseMoeBlockImpl(const MoEOptions& options) : options_(options) {
  MM_CHECK(options.hidden_size > 0 && options.intermediate_size > 0 && options.num_experts > 0,
           "SparseMoeBlock: sizes must be positive, got hidden ", options.hidden_size, ", intermediate ",
           options.intermediate_size, ", experts ", options.num_experts);
  MM_CHECK(options.top_k > 0 && options.top_k <= options.num_experts, "SparseMoeBlock: top_k must be in [1, ",
           options.num_experts, "], got ", options.top_k);
  gate = register_module("gate", Linear(options.hidden_size, options.num_experts, /*bias=*/false));
  experts = register_module("experts", torch::nn::ModuleList());
  for (int64_t e = 0; e < options.num_experts; ++e)
    experts->push_back(GatedMLP(options.hidden_size, options.intermediate_size, /*bias=*/false, options.activation));
  MM_CHECK(options.shared_intermediate_size >= 0, "SparseMoeBlock: shared_intermediate_size must be >= 0, got ",
           options.shared_intermediate_size);
  if (options.shared_intermediate_size > 0) {
    shared_expert = register_module("shared_expert", GatedMLP(options.hidden_size, options.shared_intermediate_size,
                                                              /*bias=*/false, options.activation));
    shared_expert_gate = register_module("shared_expert_gate", Linear(options.hidden_size, 1, /*bias=*/false));
  }
}

MoERouting SparseMoeBlockImpl::route(const torch::Tensor& x) {
  auto logits = gate(x);
  auto probs = torch::softmax(logits, -1, torch::kFloat32);
  auto [weights, chosen] = probs.topk(options_.top_k, -1);
  if (options_.norm_topk_prob) weights = weights / weights.sum(-1, /*keepdim=*/true);
  return {logits, probs, weights.to(logits.scalar_type()), chosen};
}

ExpertOrder sort_by_expert(const MoERouting& routing, int64_t num_experts) {
  const int64_t k = routing.experts.size(-1);
  auto assigned = routing.experts.reshape(-1);
  auto order = torch::argsort(assigned, /*stable=*/true);
  ExpertOrder out;
  out.token_of = torch::div(order, k, "floor");
  out.weight_of = routing.weights.reshape(-1).index_select(0, order);
  const auto counts = torch::bincount(assigned, {}, num_experts).to(torch::kCPU);
  out.count.assign(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + num_experts);
  return out;
}

torch::Tensor SparseMoeBlockImpl::forward(const torch::Tensor& x, LoadBalancingLoss* balance) {
  const int64_t hidden = options_.hidden_size;
  MM_CHECK(x.dim() >= 1 && x.size(-1) == hidden, "SparseMoeBlock: input must be [..., ", hidden, "], got ",
           x.sizes());
  auto flat = x.reshape({-1, hidden});  // [tokens, hidden]
  auto routing = route(flat);
  router_logits_ = routing.logits;
  auto out = dispatch ? dispatch(*this, flat, routing) : run_local_experts(flat, routing);
  // Every token through the shared expert too (never dispatched: each rank holds it whole).
  if (shared_expert) out = out + torch::sigmoid(shared_expert_gate(flat)) * shared_expert(flat);
  if (balance) out = balance->attach(out, routing.probs, routing.experts);
  return out.view(x.sizes());
}

torch::Tensor SparseMoeBlockImpl::run_expert(int64_t e, const torch::Tensor& rows) {
  return experts->ptr<GatedMLPImpl>(e)->forward(rows);
}

torch::Tensor SparseMoeBlockImpl::run_local_experts(const torch::Tensor& flat, const MoERouting& routing) {
  const auto sorted = sort_by_expert(routing, options_.num_experts);
  // One gather of every assignment's row, each expert on its contiguous run, one weighted
  // index_add at the end: index_add adds in index order, so each token still sums its experts
  // in ascending expert order, as transformers' per-expert loop does, without a full-size copy
  // of the output (and of its gradient) per expert.
  const auto rows = flat.index_select(0, sorted.token_of);
  std::vector<torch::Tensor> outputs;
  int64_t start = 0;
  for (int64_t e = 0; e < options_.num_experts; ++e) {
    const int64_t n = sorted.count[static_cast<size_t>(e)];
    if (n == 0) continue;
    outputs.push_back(run_expert(e, rows.narrow(0, start, n)));
    start += n;
  }
  if (outputs.empty()) return torch::zeros_like(flat);  // no tokens
  auto weighted = torch::cat(outputs) * sorted.weight_of.unsqueeze(-1);
  return torch::zeros_like(flat).index_add(0, sorted.token_of, weighted.to(flat.scalar_type()));
}

torch::Tensor load_balancing_loss(const std::vector<torch::Tensor>& router_logits, int64_t num_experts,
                                  int64_t top_k, const torch::Tensor& attention_mask) {
  if (router_logits.empty()) return torch::zeros({}, torch::kFloat32);
  const auto options = torch::TensorOptions().dtype(torch::kFloat32).device(router_logits.front().device());
  auto assignments = torch::zeros({num_experts}, options);
  auto probability = torch::zeros({num_experts}, options);
  auto rows = torch::zeros({}, options);
  torch::Tensor mask;  // [batch * seq] fp32, one per token row of every layer
  if (attention_mask.defined())
    mask = to_device_async(attention_mask.reshape(-1), options.device()).to(torch::kFloat32);
  // Layer by layer, as transformers accumulates, so the sums round as theirs do.
  for (const auto& layer : router_logits) {
    MM_CHECK(layer.dim() == 2 && layer.size(1) == num_experts, "load_balancing_loss: router logits must be [tokens, ",
             num_experts, "], got ", layer.sizes());
    auto probs = torch::softmax(layer.to(options.device()), -1);  // in the logits' dtype, as the reference
    auto chosen = std::get<1>(probs.topk(top_k, -1)).reshape(-1);
    if (!mask.defined()) {
      assignments = assignments + torch::bincount(chosen, {}, num_experts).to(torch::kFloat32);
      probability = probability + probs.to(torch::kFloat32).sum(0);
      rows = rows + static_cast<double>(probs.size(0));
    } else {
      MM_CHECK(mask.numel() == layer.size(0), "load_balancing_loss: attention_mask has ", mask.numel(),
               " positions but the router logits have ", layer.size(0), " rows");
      assignments = assignments + torch::zeros({num_experts}, options).scatter_add(0, chosen, mask.repeat_interleave(top_k));
      probability = probability + (probs.to(torch::kFloat32) * mask.unsqueeze(-1)).sum(0);
      rows = rows + mask.sum();
    }
  }
  return (assignments / rows * (probability / rows)).sum() * static_cast<double>(num_experts);
}

}  // namespace mm
