#include "mm/nn/varlen_attention.h"

#include <torch/torch.h>

#include <map>

#include "mm/core/error.h"

namespace mm {

VarlenSegments::VarlenSegments(const std::vector<int64_t>& cu_seqlens, c10::Device device) {
  MM_CHECK(!cu_seqlens.empty() && cu_seqlens.front() == 0,
           "varlen attention: cu_seqlens must start at 0");
  // Segment starts per length, groups in order of first appearance.
  std::vector<int64_t> lengths;
  std::vector<std::vector<int64_t>> starts;
  std::map<int64_t, size_t> group_of_length;
  for (size_t i = 1; i < cu_seqlens.size(); ++i) {
    const int64_t len = cu_seqlens[i] - cu_seqlens[i - 1];
    MM_CHECK(len >= 0, "varlen attention: cu_seqlens decreases at index ", i);
    if (len == 0) continue;
    auto [it, inserted] = group_of_length.emplace(len, lengths.size());
    if (inserted) {
      lengths.push_back(len);
      starts.emplace_back();
    }
    starts[it->second].push_back(cu_seqlens[i - 1]);
  }
  total_ = cu_seqlens.back();

  bool in_order = true;
  int64_t expected_start = 0;
  std::vector<int64_t> order;  // sequence row of each group-concatenated row
  order.reserve(static_cast<size_t>(total_));
  for (size_t g = 0; g < lengths.size(); ++g) {
    Group group;
    group.length = lengths[g];
    group.count = static_cast<int64_t>(starts[g].size());
    bool adjacent = true;
    for (size_t s = 1; s < starts[g].size(); ++s)
      adjacent = adjacent && starts[g][s] == starts[g][s - 1] + group.length;
    std::vector<int64_t> rows;
    rows.reserve(static_cast<size_t>(group.count * group.length));
    for (int64_t s : starts[g])
      for (int64_t r = 0; r < group.length; ++r) rows.push_back(s + r);
    in_order = in_order && adjacent && starts[g].front() == expected_start;
    expected_start = starts[g].front() + group.count * group.length;
    if (adjacent)
      group.start = starts[g].front();
    else
      group.rows = torch::tensor(rows, torch::kLong).to(device);
    order.insert(order.end(), rows.begin(), rows.end());
    groups_.push_back(std::move(group));
  }
  if (!in_order) {
    std::vector<int64_t> inverse(order.size());
    for (size_t i = 0; i < order.size(); ++i) inverse[static_cast<size_t>(order[i])] = static_cast<int64_t>(i);
    inverse_ = torch::tensor(inverse, torch::kLong).to(device);
  }
}

at::Tensor VarlenSegments::attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     double scale) const {
  MM_CHECK(q.dim() == 3 && q.size(0) == total_ && k.sizes() == q.sizes() && v.sizes() == q.sizes(),
           "varlen attention: q, k, v must be [", total_, ", heads, head_dim], got ", q.sizes(), ", ",
           k.sizes(), ", ", v.sizes());
  const int64_t heads = q.size(1), head_dim = q.size(2);
  std::vector<at::Tensor> outputs;
  outputs.reserve(groups_.size());
  for (const Group& g : groups_) {
    // [count * length, heads, head_dim] -> [count, heads, length, head_dim]
    auto batch = [&](const at::Tensor& x) {
      at::Tensor rows = g.start >= 0 ? x.narrow(0, g.start, g.count * g.length) : x.index_select(0, g.rows);
      return rows.view({g.count, g.length, heads, head_dim}).transpose(1, 2);
    };
    at::Tensor out = at::scaled_dot_product_attention(batch(q), batch(k), batch(v), /*attn_mask=*/{},
                                                      /*dropout_p=*/0.0, /*is_causal=*/false, scale);
    outputs.push_back(out.transpose(1, 2).reshape({g.count * g.length, heads, head_dim}));
  }
  at::Tensor out = outputs.size() == 1 ? outputs.front() : at::cat(outputs, 0);
  return inverse_.defined() ? out.index_select(0, inverse_) : out;
}

}  // namespace mm
