#include "mm/nn/gated_delta_net.h"

#include <torch/torch.h>

#include <cmath>

#include "mm/core/error.h"
#include "mm/core/host_to_device.h"
#include "mm/nn/compute_dtype.h"
#include "mm/nn/gated_delta_rule.h"
#include "mm/nn/gated_mlp.h"
#include "mm/nn/parameter_init.h"

namespace mm {
namespace {

namespace F = torch::nn::functional;

// FLA's l2norm, which transformers matches: x / sqrt(sum(x^2) + eps) over the last dimension.
torch::Tensor l2_normalize(const torch::Tensor& x) {
  return x * torch::rsqrt((x * x).sum(-1, /*keepdim=*/true) + 1e-6);
}

// x: [batch, channels, length] through the [channels, 1, kernel] filters, zero-padded by `pad`
// on both sides.
torch::Tensor depthwise_conv(const torch::Tensor& x, const torch::Tensor& weight, int64_t pad) {
  const std::vector<int64_t> stride = {1}, padding = {pad}, dilation = {1};
  return at::conv1d(x, weight, torch::Tensor(), stride, padding, dilation, weight.size(0));
}

void check_options(const GatedDeltaNetOptions& o) {
  MM_CHECK(o.hidden_size > 0 && o.num_key_heads > 0 && o.num_value_heads > 0 && o.key_head_dim > 0 &&
               o.value_head_dim > 0,
           "Gated DeltaNet: hidden_size, linear_num_key_heads, linear_num_value_heads, linear_key_head_dim and "
           "linear_value_head_dim must be positive");
  MM_CHECK(o.num_value_heads % o.num_key_heads == 0, "Gated DeltaNet: linear_num_value_heads (", o.num_value_heads,
           ") must be a multiple of linear_num_key_heads (", o.num_key_heads, ")");
  MM_CHECK(o.conv_kernel >= 1, "Gated DeltaNet: linear_conv_kernel_dim must be at least 1, got ", o.conv_kernel);
  MM_CHECK(o.chunk_size >= 1, "Gated DeltaNet: chunk_size must be at least 1, got ", o.chunk_size);
  MM_CHECK(is_supported_activation(o.activation), "Gated DeltaNet: unsupported hidden_act '", o.activation, "'");
}

}  // namespace

GatedDeltaNetImpl::GatedDeltaNetImpl(const GatedDeltaNetOptions& options) : options_(options) {
  check_options(options_);
  const auto& o = options_;
  in_proj_qkv = register_module("in_proj_qkv", Linear(o.hidden_size, o.conv_dim(), false));
  in_proj_z = register_module("in_proj_z", Linear(o.hidden_size, o.value_dim(), false));
  in_proj_b = register_module("in_proj_b", Linear(o.hidden_size, o.num_value_heads, false));
  in_proj_a = register_module("in_proj_a", Linear(o.hidden_size, o.num_value_heads, false));
  out_proj = register_module("out_proj", Linear(o.value_dim(), o.hidden_size, false));
  norm = register_module("norm", GatedRMSNorm(o.value_head_dim, o.eps));

  conv1d = register_module("conv1d", std::make_shared<torch::nn::Module>());
  conv_weight = conv1d->register_parameter("weight", torch::empty({o.conv_dim(), 1, o.conv_kernel}));
  dt_bias = register_parameter("dt_bias", torch::empty({o.num_value_heads}));
  A_log = register_parameter("A_log", torch::empty({o.num_value_heads}));
  if (!parameter_init_skipped()) {
    torch::NoGradGuard no_grad;
    // torch's Conv1d default (kaiming_uniform with a = sqrt(5)): U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
    // fan_in = kernel for a depthwise conv. dt_bias and A_log as transformers' _init_weights.
    const double bound = 1.0 / std::sqrt(static_cast<double>(o.conv_kernel));
    conv_weight.uniform_(-bound, bound);
    dt_bias.fill_(1.0);
    A_log.uniform_(0.01, 16.0).log_();
  }
}

torch::Tensor GatedDeltaNetImpl::causal_conv(const torch::Tensor& mixed, const torch::Tensor& weight,
                                             const std::vector<int64_t>& cu_seqlens, DeltaNetCache* cache) const {
  const int64_t batch = mixed.size(0), channels = mixed.size(1), seq = mixed.size(2);
  const int64_t history = options_.conv_kernel - 1;  // earlier inputs each output sees
  auto input = mixed.to(weight.scalar_type());
  torch::Tensor out;
  if (!cu_seqlens.empty()) {
    // Every sample gets `history` zero columns in front of it, so no window reaches back into the
    // sample before; one unpadded conv then runs over the whole laid-out row.
    std::vector<int64_t> columns, outputs;
    for (size_t s = 1; s < cu_seqlens.size(); ++s) {
      if (cu_seqlens[s] == cu_seqlens[s - 1]) continue;
      columns.insert(columns.end(), history, seq);
      for (int64_t t = cu_seqlens[s - 1]; t < cu_seqlens[s]; ++t) {
        outputs.push_back(static_cast<int64_t>(columns.size()) - history);
        columns.push_back(t);
      }
    }
    auto index = host_values_on(columns, input.device());
    auto laid_out = torch::cat({input, torch::zeros({batch, channels, 1}, input.options())}, 2).index_select(2, index);
    out = depthwise_conv(laid_out, weight, 0)
              .index_select(2, host_values_on(outputs, input.device()));
  } else if (cache != nullptr) {
    auto previous = cache->empty() ? torch::zeros({batch, channels, history}, input.options()) : cache->conv;
    MM_CHECK(previous.sizes() == torch::IntArrayRef({batch, channels, history}),
             "Gated DeltaNet: the cached conv state is ", previous.sizes(), ", expected [", batch, ", ", channels,
             ", ", history, "]");
    auto full = torch::cat({previous.to(input.scalar_type()), input}, 2);
    out = depthwise_conv(full, weight, 0);
    cache->conv = full.narrow(2, full.size(2) - history, history).detach();
  } else {
    out = depthwise_conv(input, weight, history).narrow(2, 0, seq);
  }
  return apply_activation(options_.activation, out).to(mixed.scalar_type());
}

DeltaRuleOutput GatedDeltaNetImpl::delta_rule(torch::Tensor q, torch::Tensor k, const torch::Tensor& v,
                                              const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& A_log,
                                              const torch::Tensor& dt_bias, int64_t group,
                                              const std::vector<int64_t>& cu_seqlens, DeltaNetCache* cache) const {
  const int64_t seq = v.size(1);
  auto beta = b.sigmoid();
  // In fp32 whatever the weights' dtype, as transformers computes it (in fp16, -exp(A_log) can
  // reach -inf); fp64 stays fp64.
  const auto fp = at_least_fp32(v.scalar_type());
  auto g = -A_log.to(fp).exp() * F::softplus(a.to(fp) + dt_bias);
  if (group > 1) {
    q = q.repeat_interleave(group, 2);
    k = k.repeat_interleave(group, 2);
  }
  q = l2_normalize(q.to(fp)) * (1.0 / std::sqrt(static_cast<double>(options_.key_head_dim)));
  k = l2_normalize(k.to(fp));
  if (!cu_seqlens.empty()) return gated_delta_rule_varlen(q, k, v, g, beta, cu_seqlens, options_.chunk_size);
  torch::Tensor initial = cache != nullptr ? cache->recurrent : torch::Tensor();
  auto rule = (initial.defined() && seq == 1) ? gated_delta_rule_recurrent(q, k, v, g, beta, initial)
                                              : gated_delta_rule_chunked(q, k, v, g, beta, options_.chunk_size, initial);
  if (cache != nullptr) cache->recurrent = rule.state.detach();
  return rule;
}

torch::Tensor GatedDeltaNetImpl::forward(const torch::Tensor& x, const torch::Tensor& attention_mask,
                                         const std::vector<int64_t>& cu_seqlens, DeltaNetCache* cache,
                                         const SequenceSplit* split) {
  const auto& o = options_;
  MM_CHECK(x.dim() == 3 && x.size(2) == o.hidden_size, "Gated DeltaNet: input must be [batch, seq, ", o.hidden_size,
           "], got ", x.sizes());
  const int64_t batch = x.size(0), seq = x.size(1);
  if (split != nullptr) {
    MM_CHECK(!attention_mask.defined() && cu_seqlens.empty() && cache == nullptr,
             "Gated DeltaNet: a context-parallel forward takes no attention mask, cu_seqlens or cache (the split has "
             "the documents)");
    return forward_split(x, *split);
  }
  if (!cu_seqlens.empty()) {
    MM_CHECK(batch == 1, "Gated DeltaNet: a packed row (cu_seqlens) has batch 1, got ", batch);
    MM_CHECK(cache == nullptr, "Gated DeltaNet: packed rows (cu_seqlens) are for training and take no cache");
    check_cu_seqlens(cu_seqlens, seq, "Gated DeltaNet");
  }
  auto h = x;
  if (attention_mask.defined()) {
    MM_CHECK(attention_mask.sizes() == x.sizes().slice(0, 2), "Gated DeltaNet: attention_mask must be [", batch,
             ", ", seq, "], got ", attention_mask.sizes());
    h = (h * attention_mask.unsqueeze(-1)).to(x.scalar_type());
  }

  auto mixed = causal_conv(in_proj_qkv(h).transpose(1, 2), conv_weight, cu_seqlens, cache).transpose(1, 2);
  auto parts = mixed.split_with_sizes({o.key_dim(), o.key_dim(), o.value_dim()}, -1);
  auto rule = delta_rule(parts[0].reshape({batch, seq, o.num_key_heads, o.key_head_dim}),
                         parts[1].reshape({batch, seq, o.num_key_heads, o.key_head_dim}),
                         parts[2].reshape({batch, seq, o.num_value_heads, o.value_head_dim}), in_proj_a(h),
                         in_proj_b(h), A_log, dt_bias, o.num_value_heads / o.num_key_heads, cu_seqlens, cache);
  auto z = in_proj_z(h).reshape({-1, o.value_head_dim});
  auto core = norm(rule.out.to(x.scalar_type()).reshape({-1, o.value_head_dim}), z);
  return out_proj(core.reshape({batch, seq, o.value_dim()}));
}

torch::Tensor GatedDeltaNetImpl::forward_split(const torch::Tensor& x, const SequenceSplit& split) {
  const auto& o = options_;
  const int64_t ranks = split.ranks, batch = x.size(0), local = x.size(1), total = split.total;
  const int64_t group = o.num_value_heads / o.num_key_heads;
  // What travels as one head: a key head with the `group` value heads that read it, or, with fewer
  // key heads than ranks, one value head with a copy of its key head's q and k.
  const bool by_key_head = o.num_key_heads % ranks == 0;
  MM_CHECK(by_key_head || o.num_value_heads % ranks == 0, "Gated DeltaNet: context parallelism over ", ranks,
           " ranks splits this layer's heads between them, but neither linear_num_key_heads (", o.num_key_heads,
           ") nor linear_num_value_heads (", o.num_value_heads, ") is a multiple of ", ranks);
  MM_CHECK(local == static_cast<int64_t>(split.positions.size()), "Gated DeltaNet: the context-parallel split holds ",
           split.positions.size(), " tokens here but the input has ", local);
  const int64_t units = by_key_head ? o.num_key_heads : o.num_value_heads, values_per_unit = o.num_value_heads / units;
  const int64_t mine = units / ranks, first = split.rank * mine;

  // This rank's tokens, all heads: [batch, units, local, q | k | v | b | a].
  auto parts = in_proj_qkv(x).split_with_sizes({o.key_dim(), o.key_dim(), o.value_dim()}, -1);
  auto q = parts[0].reshape({batch, local, o.num_key_heads, o.key_head_dim});
  auto k = parts[1].reshape({batch, local, o.num_key_heads, o.key_head_dim});
  if (!by_key_head) {
    q = q.repeat_interleave(group, 2);
    k = k.repeat_interleave(group, 2);
  }
  auto v = parts[2].reshape({batch, local, units, values_per_unit * o.value_head_dim});
  auto b = in_proj_b(x).reshape({batch, local, units, values_per_unit});
  auto a = in_proj_a(x).reshape({batch, local, units, values_per_unit});
  // -> the whole sequence of this rank's units: [batch, total, mine, ...].
  auto whole = split.to_heads(torch::cat({q, k, v, b, a}, -1).transpose(1, 2)).transpose(1, 2);
  MM_CHECK(whole.size(1) == total, "Gated DeltaNet: the head exchange gave ", whole.size(1), " tokens of ", total);
  auto cols = whole.split_with_sizes(
      {o.key_head_dim, o.key_head_dim, values_per_unit * o.value_head_dim, values_per_unit, values_per_unit}, -1);

  // The conv's channels of these units, in the layer's q | k | v order, through their filter rows.
  std::vector<int64_t> rows;
  for (int part = 0; part < 2; ++part)
    for (int64_t u = first; u < first + mine; ++u)
      for (int64_t d = 0; d < o.key_head_dim; ++d)
        rows.push_back(part * o.key_dim() + (by_key_head ? u : u / group) * o.key_head_dim + d);
  for (int64_t c = first * values_per_unit * o.value_head_dim; c < (first + mine) * values_per_unit * o.value_head_dim;
       ++c)
    rows.push_back(2 * o.key_dim() + c);
  const auto weight = conv_weight.index_select(0, host_values_on(rows, conv_weight.device()));
  std::vector<int64_t> documents;
  if (split.cu_seqlens.size() > 2) {
    MM_CHECK(batch == 1, "Gated DeltaNet: a context-parallel split of several documents has batch 1, got ", batch);
    documents = split.cu_seqlens;
  }
  auto mixed = causal_conv(
      torch::cat({cols[0].reshape({batch, total, -1}), cols[1].reshape({batch, total, -1}),
                  cols[2].reshape({batch, total, -1})}, -1).transpose(1, 2),
      weight, documents, nullptr).transpose(1, 2);
  const int64_t key_width = mine * o.key_head_dim, heads = mine * values_per_unit;
  auto mixed_parts = mixed.split_with_sizes({key_width, key_width, heads * o.value_head_dim}, -1);
  auto rule = delta_rule(mixed_parts[0].reshape({batch, total, mine, o.key_head_dim}),
                         mixed_parts[1].reshape({batch, total, mine, o.key_head_dim}),
                         mixed_parts[2].reshape({batch, total, heads, o.value_head_dim}),
                         cols[4].reshape({batch, total, heads}), cols[3].reshape({batch, total, heads}),
                         A_log.narrow(0, split.rank * heads, heads), dt_bias.narrow(0, split.rank * heads, heads),
                         by_key_head ? group : 1, documents, nullptr);

  // Back to this rank's tokens, all value heads; the gated norm and out_proj per token.
  auto out = split.from_heads(rule.out.to(x.scalar_type()).transpose(1, 2)).transpose(1, 2);
  auto z = in_proj_z(x).reshape({-1, o.value_head_dim});
  auto core = norm(out.reshape({-1, o.value_head_dim}), z);
  return out_proj(core.reshape({batch, local, o.value_dim()}));
}

}  // namespace mm
