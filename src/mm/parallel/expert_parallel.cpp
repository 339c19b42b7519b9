#include "mm/parallel/expert_parallel.h"

#include <torch/torch.h>

#include <map>

#include "mm/core/error.h"
#include "mm/core/host_to_device.h"

namespace mm::parallel {
namespace {

// The dispatch of one forward. `mine`: the experts of this rank.
torch::Tensor dispatch_over(SparseMoeBlockImpl& block, const torch::Tensor& flat, const MoERouting& routing,
                            const Group& group, ExpertRange mine) {
  const int64_t num_experts = block.options().num_experts, world = group->getSize();
  const int64_t per_rank = mine.count;
  const auto sorted = sort_by_expert(routing, num_experts);

  // What goes to each rank: its experts' assignments, in expert order (the sorted order already).
  std::vector<int64_t> send(static_cast<size_t>(world), 0);
  for (int64_t e = 0; e < num_experts; ++e) send[static_cast<size_t>(e / per_rank)] += sorted.count[static_cast<size_t>(e)];
  // Each rank learns how many rows every rank sends to each of its experts.
  const std::vector<int64_t> per_expert_split(static_cast<size_t>(world), per_rank);
  const auto count_tensor = host_values_on(sorted.count, flat.device());
  const auto from_tensor = all_to_all_rows(count_tensor, per_expert_split, per_expert_split, group).cpu();
  const int64_t* from = from_tensor.data_ptr<int64_t>();  // [world][per_rank]: source i, local expert l
  std::vector<int64_t> recv(static_cast<size_t>(world), 0), source_start(static_cast<size_t>(world), 0);
  int64_t received_rows = 0;
  for (int64_t i = 0; i < world; ++i) {
    for (int64_t l = 0; l < per_rank; ++l) recv[static_cast<size_t>(i)] += from[i * per_rank + l];
    source_start[static_cast<size_t>(i)] = received_rows;
    received_rows += recv[static_cast<size_t>(i)];
  }
  auto rows = all_to_all_rows(flat.index_select(0, sorted.token_of), send, recv, group);  // source by source

  // Regrouped by local expert (each expert's rows source by source, so in the order the
  // single-process block sees them), run, and put back in arrival order.
  std::vector<int64_t> perm;
  perm.reserve(static_cast<size_t>(received_rows));
  std::vector<int64_t> expert_rows(static_cast<size_t>(per_rank), 0);
  for (int64_t l = 0; l < per_rank; ++l)
    for (int64_t i = 0; i < world; ++i) {
      int64_t start = source_start[static_cast<size_t>(i)];
      for (int64_t m = 0; m < l; ++m) start += from[i * per_rank + m];
      const int64_t n = from[i * per_rank + l];
      for (int64_t q = 0; q < n; ++q) perm.push_back(start + q);
      expert_rows[static_cast<size_t>(l)] += n;
    }
  torch::Tensor outputs;
  if (received_rows == 0) {
    outputs = rows;  // [0, hidden]: nothing to compute, but the exchange back still takes place
  } else {
    const auto perm_tensor = host_values_on(perm, flat.device());
    const auto by_expert = rows.index_select(0, perm_tensor);
    std::vector<torch::Tensor> ys;
    int64_t start = 0;
    for (int64_t l = 0; l < per_rank; ++l) {
      const int64_t n = expert_rows[static_cast<size_t>(l)];
      if (n == 0) continue;
      ys.push_back(block.run_expert(mine.first + l, by_expert.narrow(0, start, n)).to(rows.scalar_type()));
      start += n;
    }
    outputs = torch::cat(ys).index_select(0, torch::argsort(perm_tensor));
  }
  auto returned = all_to_all_rows(outputs, recv, send, group);  // [tokens * top_k, hidden], sorted order
  auto weighted = returned * sorted.weight_of.unsqueeze(-1);
  return torch::zeros_like(flat).index_add(0, sorted.token_of, weighted.to(flat.scalar_type()));
}

}  // namespace

ExpertRange local_experts(int64_t num_experts, int64_t ep_size, int64_t ep_rank) {
  MM_CHECK(ep_size > 0 && num_experts % ep_size == 0, "expert parallelism: ep=", ep_size,
           " does not divide the model's ", num_experts, " experts (num_experts)");
  MM_CHECK(ep_rank >= 0 && ep_rank < ep_size, "expert parallelism: rank ", ep_rank, " outside ep=", ep_size);
  const int64_t count = num_experts / ep_size;
  return {ep_rank * count, count};
}

ExpertRange apply_expert_parallel(SparseMoeBlockImpl& block, const Group& group) {
  const int64_t num_experts = block.options().num_experts;
  if (!group) return {0, num_experts};
  const auto mine = local_experts(num_experts, group->getSize(), group->getRank());
  for (int64_t e = 0; e < num_experts; ++e) {
    if (mine.contains(e)) continue;
    for (auto& p : block.experts[static_cast<size_t>(e)]->parameters()) {
      p.requires_grad_(false);
      p.set_data(torch::empty({0}, p.options()));
    }
  }
  block.dispatch = [group, mine](SparseMoeBlockImpl& b, const torch::Tensor& flat, const MoERouting& routing) {
    return dispatch_over(b, flat, routing, group, mine);
  };
  return mine;
}

bool ExpertPlacement::holds(const std::string& name) const {
  for (const auto& p : params)
    if (p.name == name) return p.local;
  return false;
}

bool ExpertPlacement::elsewhere(const std::string& name) const {
  for (const auto& p : params)
    if (p.name == name) return !p.local;
  return false;
}

std::vector<std::pair<std::string, std::string>> ExpertPlacement::counterparts() const {
  std::map<std::string, const ExpertParameter*> local;  // block | local index | suffix
  auto key = [this](const ExpertParameter& p) {
    return p.block + "|" + std::to_string(p.expert % experts_per_rank) + "|" + p.suffix;
  };
  for (const auto& p : params)
    if (p.local) local[key(p)] = &p;
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& p : params)
    if (!p.local) out.emplace_back(p.name, local.at(key(p))->name);
  return out;
}

ExpertPlacement apply_expert_parallel(torch::nn::Module& model, const Group& group) {
  MM_CHECK(group, "expert parallelism: no ep group (one rank)");
  ExpertPlacement out;
  out.group = group;
  out.ep_size = group->getSize();
  out.ep_rank = group->getRank();
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    auto* block = dynamic_cast<SparseMoeBlockImpl*>(item.value().get());
    if (!block) continue;
    // Recorded before the release empties the tensors.
    const int64_t num_experts = block->options().num_experts;
    const auto mine = local_experts(num_experts, out.ep_size, out.ep_rank);
    out.experts_per_rank = mine.count;
    for (int64_t e = 0; e < num_experts; ++e)
      for (const auto& p : block->experts[static_cast<size_t>(e)]->named_parameters()) {
        ExpertParameter param;
        param.block = item.key();
        param.suffix = p.key();
        param.expert = e;
        param.name = str_cat(item.key(), ".experts.", e, ".", p.key());
        param.shape = p.value().sizes().vec();
        param.tensor = p.value();
        param.local = mine.contains(e);
        out.params.push_back(std::move(param));
      }
    apply_expert_parallel(*block, group);
  }
  MM_CHECK(!out.params.empty(), "expert parallelism (parallel.ep=", out.ep_size, "): the model has no MoE layer");
  return out;
}

void gather_experts(ExpertPlacement& placement) {
  torch::NoGradGuard no_grad;
  std::map<std::string, ExpertParameter*> by_key;  // block | expert | suffix
  auto key = [](const std::string& block, int64_t e, const std::string& suffix) {
    return block + "|" + std::to_string(e) + "|" + suffix;
  };
  for (auto& p : placement.params) by_key[key(p.block, p.expert, p.suffix)] = &p;
  // Local expert l of rank r is expert r * per_rank + l: the i-th local parameter of every rank
  // has the same block, suffix and shape, so one all-gather over the group gives them all.
  for (auto& p : placement.params) {
    if (!p.local) continue;
    const int64_t l = p.expert - placement.ep_rank * placement.experts_per_rank;
    std::vector<at::Tensor> slots;
    for (int64_t r = 0; r < placement.ep_size; ++r) {
      auto* owner = by_key.at(key(p.block, r * placement.experts_per_rank + l, p.suffix));
      if (!owner->local) owner->tensor.set_data(torch::empty(owner->shape, p.tensor.options()));
      slots.push_back(owner->local ? torch::empty_like(p.tensor) : owner->tensor.detach());
    }
    std::vector<std::vector<at::Tensor>> outputs{slots};
    std::vector<at::Tensor> inputs{p.tensor.detach().contiguous()};
    placement.group->allgather(outputs, inputs)->wait();
  }
}

}  // namespace mm::parallel
