#include "mm/models/wan/wan_attention.h"

#include <torch/torch.h>

#include <cmath>

#include "mm/core/error.h"
#include "mm/models/wan/wan_rotary.h"

namespace mm {
namespace {

// q, k, v: [batch, tokens, heads, head_dim] -> [batch, tokens, heads * head_dim]; through the
// split's attention (context parallelism: these are this rank's tokens) when there is one.
torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     const SequenceSplit* split = nullptr) {
  const auto out = split ? split->attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                            1.0 / std::sqrt(static_cast<double>(q.size(-1))))
                         : at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2));
  return out.transpose(1, 2).flatten(2, 3).to(q.scalar_type());
}

}  // namespace

WanAttentionImpl::WanAttentionImpl(int64_t dim, int64_t heads, double eps, std::optional<int64_t> added_kv_dim)
    : heads_(heads) {
  to_q = register_module("to_q", Linear(dim, dim, true));
  to_k = register_module("to_k", Linear(dim, dim, true));
  to_v = register_module("to_v", Linear(dim, dim, true));
  to_out = register_module("to_out", torch::nn::ModuleList(Linear(dim, dim, true)));
  norm_q = register_module("norm_q", WanRMSNorm(dim, eps));
  norm_k = register_module("norm_k", WanRMSNorm(dim, eps));
  if (added_kv_dim) {
    add_k_proj = register_module("add_k_proj", Linear(*added_kv_dim, dim, true));
    add_v_proj = register_module("add_v_proj", Linear(*added_kv_dim, dim, true));
    norm_added_k = register_module("norm_added_k", WanRMSNorm(dim, eps));
  }
}

torch::Tensor WanAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& context, int64_t image_tokens,
                                        const WanRotaryTables* rotary, const SequenceSplit* split) {
  MM_CHECK(!split || !context.defined(), "Wan attention: a sequence split is for self-attention only");
  MM_CHECK(image_tokens == 0 || add_k_proj, "Wan attention: image tokens given to a layer without add_k_proj (config ",
           "has no added_kv_proj_dim)");
  const auto source = !context.defined() ? x : image_tokens > 0 ? context.slice(1, image_tokens) : context;
  auto heads = [&](const torch::Tensor& t) { return t.unflatten(2, {heads_, -1}); };
  auto q = heads(norm_q(to_q(x)));
  auto k = heads(norm_k(to_k(source)));
  const auto v = heads(to_v(source));
  if (rotary) {
    q = wan_apply_rotary(q, *rotary);
    k = wan_apply_rotary(k, *rotary);
  }
  auto out = attend(q, k, v, split);
  if (image_tokens > 0) {
    const auto image = context.slice(1, 0, image_tokens);
    out = out + attend(q, heads(norm_added_k(add_k_proj(image))), heads(add_v_proj(image)));
  }
  return to_out->ptr<LinearImpl>(0)->forward(out);
}

}  // namespace mm
