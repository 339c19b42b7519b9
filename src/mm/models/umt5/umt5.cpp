#include "mm/models/umt5/umt5.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "mm/core/error.h"
#include "mm/core/host_to_device.h"
#include "mm/core/safetensors.h"
#include "mm/nn/parameter_init.h"
#include "mm/nn/weights.h"

namespace mm {
namespace {

// torch.finfo(dtype).min, what transformers fills masked scores with.
double lowest_of(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kBFloat16: return static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest());
    case torch::kHalf: return static_cast<double>(std::numeric_limits<c10::Half>::lowest());
    case torch::kDouble: return std::numeric_limits<double>::lowest();
    default: return std::numeric_limits<float>::lowest();
  }
}

}  // namespace

torch::Tensor umt5_relative_position_buckets(const torch::Tensor& relative_position, int64_t num_buckets,
                                             int64_t max_distance) {
  const int64_t half = num_buckets / 2;  // one half per direction
  auto buckets = relative_position.gt(0).to(torch::kLong) * half;
  const auto distance = relative_position.abs();
  const int64_t max_exact = half / 2;
  // The same float32 arithmetic as transformers, so boundary distances land in the same bucket.
  const auto log_ratio = torch::log(distance.to(torch::kFloat32) / static_cast<double>(max_exact)) /
                         std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact));
  auto large = max_exact + (log_ratio * static_cast<double>(half - max_exact)).to(torch::kLong);
  large = torch::clamp_max(large, half - 1);
  return buckets + torch::where(distance.lt(max_exact), distance, large);
}

UMT5AttentionImpl::UMT5AttentionImpl(const UMT5Config& config) : config_(config) {
  const int64_t inner = config.num_heads * config.d_kv;
  q = register_module("q", Linear(config.d_model, inner, false));
  k = register_module("k", Linear(config.d_model, inner, false));
  v = register_module("v", Linear(config.d_model, inner, false));
  o = register_module("o", Linear(inner, config.d_model, false));
  relative_attention_bias = register_module(
      "relative_attention_bias", embedding(config.relative_attention_num_buckets, config.num_heads));
}

torch::Tensor UMT5AttentionImpl::position_bias(int64_t seq, const torch::Device& device) {
  const auto positions = torch::arange(seq, torch::TensorOptions().dtype(torch::kLong).device(device));
  const auto relative = positions.unsqueeze(0) - positions.unsqueeze(1);  // [q, k]: key - query
  const auto buckets = umt5_relative_position_buckets(relative, config_.relative_attention_num_buckets,
                                                      config_.relative_attention_max_distance);
  return relative_attention_bias(buckets).permute({2, 0, 1}).unsqueeze(0);  // [1, heads, q, k]
}

torch::Tensor UMT5AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& mask) {
  const int64_t batch = x.size(0), seq = x.size(1);
  auto heads = [&](const torch::Tensor& t) {
    return t.view({batch, seq, config_.num_heads, config_.d_kv}).transpose(1, 2);
  };
  auto bias = position_bias(seq, x.device()).to(x.scalar_type());
  if (mask.defined()) bias = bias + mask;
  // T5 does not scale the scores: the bias was learned on unscaled dot products.
  const auto out = at::scaled_dot_product_attention(heads(q(x)), heads(k(x)), heads(v(x)), bias, 0.0,
                                                    /*is_causal=*/false, /*scale=*/1.0);
  return o(out.transpose(1, 2).reshape({batch, seq, config_.num_heads * config_.d_kv}));
}

UMT5FeedForwardImpl::UMT5FeedForwardImpl(const UMT5Config& config) : config_(config) {
  if (config.gated()) {
    wi_0 = register_module("wi_0", Linear(config.d_model, config.d_ff, false));
    wi_1 = register_module("wi_1", Linear(config.d_model, config.d_ff, false));
  } else {
    wi = register_module("wi", Linear(config.d_model, config.d_ff, false));
  }
  wo = register_module("wo", Linear(config.d_ff, config.d_model, false));
}

torch::Tensor UMT5FeedForwardImpl::forward(const torch::Tensor& x) {
  const std::string act = config_.activation();
  auto activate = [&](const torch::Tensor& h) {
    if (act == "relu") return torch::relu(h);
    return torch::gelu(h, act == "gelu_tanh" ? "tanh" : "none");
  };
  const auto h = config_.gated() ? activate(wi_0(x)) * wi_1(x) : activate(wi(x));
  return wo(h);
}

UMT5SelfAttentionLayerImpl::UMT5SelfAttentionLayerImpl(const UMT5Config& config) {
  SelfAttention = register_module("SelfAttention", UMT5Attention(config));
  layer_norm = register_module("layer_norm", RMSNorm(config.d_model, config.layer_norm_epsilon));
}

torch::Tensor UMT5SelfAttentionLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& mask) {
  return x + SelfAttention(layer_norm(x), mask);
}

UMT5FeedForwardLayerImpl::UMT5FeedForwardLayerImpl(const UMT5Config& config) {
  DenseReluDense = register_module("DenseReluDense", UMT5FeedForward(config));
  layer_norm = register_module("layer_norm", RMSNorm(config.d_model, config.layer_norm_epsilon));
}

torch::Tensor UMT5FeedForwardLayerImpl::forward(const torch::Tensor& x) { return x + DenseReluDense(layer_norm(x)); }

UMT5BlockImpl::UMT5BlockImpl(const UMT5Config& config) {
  layer = register_module("layer", torch::nn::ModuleList(UMT5SelfAttentionLayer(config), UMT5FeedForwardLayer(config)));
}

torch::Tensor UMT5BlockImpl::forward(const torch::Tensor& x, const torch::Tensor& mask) {
  const auto h = layer->ptr<UMT5SelfAttentionLayerImpl>(0)->forward(x, mask);
  return layer->ptr<UMT5FeedForwardLayerImpl>(1)->forward(h);
}

UMT5StackImpl::UMT5StackImpl(const UMT5Config& config) {
  block = register_module("block", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.num_layers; ++i) block->push_back(UMT5Block(config));
  final_layer_norm = register_module("final_layer_norm", RMSNorm(config.d_model, config.layer_norm_epsilon));
}

torch::Tensor UMT5StackImpl::forward(const torch::Tensor& embeds, const torch::Tensor& attention_mask) {
  torch::Tensor mask;  // additive: 0 for tokens, the dtype's lowest value for padding keys
  if (attention_mask.defined()) {
    MM_CHECK(attention_mask.dim() == 2 && attention_mask.size(0) == embeds.size(0) &&
                 attention_mask.size(1) == embeds.size(1),
             "umT5: attention_mask must be [batch, seq] = [", embeds.size(0), ", ", embeds.size(1), "], got ",
             attention_mask.sizes());
    const auto keep =
        to_device_async(attention_mask, embeds.device()).to(torch::kBool).view({embeds.size(0), 1, 1, embeds.size(1)});
    mask = torch::zeros(keep.sizes(), embeds.options()).masked_fill(keep.logical_not(), lowest_of(embeds.scalar_type()));
  }
  auto h = embeds;
  for (const auto& item : *block) h = item->as<UMT5BlockImpl>()->forward(h, mask);
  return final_layer_norm(h);
}

UMT5EncoderModelImpl::UMT5EncoderModelImpl(const UMT5Config& config) : config_(config) {
  config.validate();
  shared = register_module("shared", embedding(config.vocab_size, config.d_model));
  encoder = register_module("encoder", UMT5Stack(config));
}

std::shared_ptr<UMT5EncoderModelImpl> UMT5EncoderModelImpl::from_pretrained(const std::filesystem::path& dir,
                                                                           torch::ScalarType dtype, const c10::Device& device) {
  MM_CHECK(std::filesystem::is_directory(dir), "umT5 from_pretrained: ", dir.string(), " is not a directory");
  const auto config = UMT5Config::from_file(dir / "config.json");
  auto model = build_for_loading(dtype, device, [&] { return std::make_shared<UMT5EncoderModelImpl>(config); });
  const auto checkpoint = Checkpoint::open(dir);
  // encoder.embed_tokens is tied to shared: saved under either name (or both).
  const bool has_shared = checkpoint.contains("shared.weight");
  WeightLoadOptions options;
  options.checkpoint_to_module = [has_shared](const std::string& name) -> std::string {
    if (name == "encoder.embed_tokens.weight") return has_shared ? "" : "shared.weight";
    return name;
  };
  load_weights(*model, checkpoint, options);
  model->eval();
  return model;
}

torch::Tensor UMT5EncoderModelImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) {
  MM_CHECK(input_ids.dim() == 2, "umT5: input_ids must be [batch, seq], got ", input_ids.sizes());
  return encoder(shared(to_device_async(input_ids, shared->weight.device())), attention_mask);
}

}  // namespace mm
