#include "mm/nn/varlen_attention.h"

#include <ATen/ops/_flash_attention_forward.h>
#include <torch/torch.h>

#include <cstdlib>
#include <cstring>
#include <map>

#include "mm/core/error.h"
#include "mm/core/host_to_device.h"

namespace mm {

VarlenSegments::VarlenSegments(const std::vector<int64_t>& cu_seqlens, c10::Device device)
    : cu_seqlens_(cu_seqlens), device_(device) {
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
    max_length_ = std::max(max_length_, len);
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
      group.rows = host_values_on(rows, device);
    order.insert(order.end(), rows.begin(), rows.end());
    groups_.push_back(std::move(group));
  }
  if (!in_order) {
    std::vector<int64_t> inverse(order.size());
    for (size_t i = 0; i < order.size(); ++i) inverse[static_cast<size_t>(order[i])] = static_cast<int64_t>(i);
    inverse_ = host_values_on(inverse, device);
  }
}

bool VarlenSegments::flash_applies(const at::Tensor& q) {
  static const bool turned_off = [] {
    const char* kernel = std::getenv("MM_VARLEN_KERNEL");
    return kernel != nullptr && std::strcmp(kernel, "sdpa") == 0;
  }();
  const int64_t head_dim = q.size(-1);
  return !turned_off && q.is_cuda() && (q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf) &&
         head_dim % 8 == 0 && head_dim <= 256;
}

at::Tensor VarlenSegments::attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale,
                                     bool causal, VarlenKernel kernel) const {
  MM_CHECK(q.dim() == 3 && q.size(0) == total_ && k.dim() == 3 && k.sizes() == v.sizes() && k.size(0) == total_ &&
               k.size(2) == q.size(2) && k.size(1) > 0 && q.size(1) % k.size(1) == 0,
           "varlen attention: q must be [", total_, ", heads, head_dim] and k, v [", total_,
           ", kv_heads, head_dim] with kv_heads dividing heads, got ", q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  const bool use_flash = kernel == VarlenKernel::flash || (kernel == VarlenKernel::automatic && flash_applies(q));
  return use_flash ? flash(q, k, v, scale, causal) : sdpa(q, k, v, scale, causal);
}

at::Tensor VarlenSegments::flash(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale,
                                 bool causal) const {
  MM_CHECK(q.is_cuda(), "varlen attention: the flash kernel runs on CUDA tensors, got ", q.device().str());
  if (!cu_seqlens_int32_.defined())
    cu_seqlens_int32_ = host_values_on(cu_seqlens_, q.device(), torch::kInt32);
  // The kernel wants the last dimension contiguous; [seq, heads, head_dim] is its varlen layout.
  auto out = std::get<0>(at::_flash_attention_forward(q.contiguous(), k.contiguous(), v.contiguous(), cu_seqlens_int32_,
                                                      cu_seqlens_int32_, max_length_, max_length_, /*dropout_p=*/0.0,
                                                      causal, /*return_debug_mask=*/false, scale));
  return out;
}

at::Tensor VarlenSegments::sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale,
                                bool causal) const {
  const int64_t heads = q.size(1), kv_heads = k.size(1), head_dim = q.size(2);
  std::vector<at::Tensor> outputs;
  outputs.reserve(groups_.size());
  for (const Group& g : groups_) {
    // [count * length, h, head_dim] -> [count, h, length, head_dim]
    auto batch = [&](const at::Tensor& x) {
      at::Tensor rows = g.start >= 0 ? x.narrow(0, g.start, g.count * g.length) : x.index_select(0, g.rows);
      return rows.view({g.count, g.length, x.size(1), head_dim}).transpose(1, 2);
    };
    // Each segment is its own batch entry starting at its first position, so SDPA's causal
    // (upper-left) mask is the segment's own.
    at::Tensor out = at::scaled_dot_product_attention(batch(q), batch(k), batch(v), /*attn_mask=*/{},
                                                      /*dropout_p=*/0.0, causal, scale,
                                                      /*enable_gqa=*/kv_heads != heads);
    outputs.push_back(out.transpose(1, 2).reshape({g.count * g.length, heads, head_dim}));
  }
  at::Tensor out = outputs.size() == 1 ? outputs.front() : at::cat(outputs, 0);
  return inverse_.defined() ? out.index_select(0, inverse_) : out;
}

std::string varlen_backend(const c10::Device& device) {
  if (!device.is_cuda()) return "sdpa_per_length";
  const auto q = at::zeros({1, 1, 64}, at::TensorOptions().device(device).dtype(at::kBFloat16));
  return VarlenSegments::flash_applies(q) ? "flash_varlen" : "sdpa_per_length";
}

}  // namespace mm
