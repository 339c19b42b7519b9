// The umT5 encoder (transformers' UMT5EncoderModel): token embeddings, num_layers pre-norm blocks
// of self-attention with a per-layer bucketed relative position bias (no 1/sqrt(d) scaling) and
// a gated-GELU feed-forward, a final RMS norm. The text encoder of Wan2.1/2.2.
// Parameter names as the HF checkpoint: shared.weight, encoder.block.N.layer.0.SelfAttention.
// {q,k,v,o}.weight, encoder.block.N.layer.0.SelfAttention.relative_attention_bias.weight,
// encoder.block.N.layer.0.layer_norm.weight, encoder.block.N.layer.1.DenseReluDense.{wi_0,wi_1,wo}
// .weight (wi when ungated), encoder.block.N.layer.1.layer_norm.weight,
// encoder.final_layer_norm.weight. (encoder.embed_tokens.weight is tied to shared.weight.)
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

#include <filesystem>

#include "mm/nn/linear.h"
#include "mm/nn/norms.h"
#include "mm/models/umt5/umt5_config.h"

namespace mm {

// T5's bucketing of relative positions (memory - query) for a bidirectional encoder: half the
// buckets for each sign; within a half, exact buckets below num_buckets / 4 and logarithmic ones
// up to max_distance. relative_position: [q, k] int64 -> bucket ids [q, k] int64.
torch::Tensor umt5_relative_position_buckets(const torch::Tensor& relative_position, int64_t num_buckets,
                                             int64_t max_distance);

class UMT5AttentionImpl : public torch::nn::Module {
 public:
  explicit UMT5AttentionImpl(const UMT5Config& config);
  // x: [batch, seq, d_model]; mask: additive [batch, 1, 1, seq] (0 or a large negative) or
  // undefined -> [batch, seq, d_model].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask);
  // The bias added to the scores: [1, heads, seq, seq].
  torch::Tensor position_bias(int64_t seq, const torch::Device& device);

  Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};
  torch::nn::Embedding relative_attention_bias{nullptr};  // [buckets, heads]

 private:
  UMT5Config config_;
};
TORCH_MODULE(UMT5Attention);

class UMT5FeedForwardImpl : public torch::nn::Module {
 public:
  explicit UMT5FeedForwardImpl(const UMT5Config& config);
  torch::Tensor forward(const torch::Tensor& x);  // [..., d_model] -> [..., d_model]
  Linear wi_0{nullptr}, wi_1{nullptr}, wi{nullptr}, wo{nullptr};  // wi_0/wi_1 gated, wi ungated

 private:
  UMT5Config config_;
};
TORCH_MODULE(UMT5FeedForward);

// layer.0 (SelfAttention + layer_norm) and layer.1 (DenseReluDense + layer_norm) of one block.
class UMT5SelfAttentionLayerImpl : public torch::nn::Module {
 public:
  explicit UMT5SelfAttentionLayerImpl(const UMT5Config& config);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask);  // x + attn(norm(x))
  UMT5Attention SelfAttention{nullptr};
  RMSNorm layer_norm{nullptr};
};
TORCH_MODULE(UMT5SelfAttentionLayer);

class UMT5FeedForwardLayerImpl : public torch::nn::Module {
 public:
  explicit UMT5FeedForwardLayerImpl(const UMT5Config& config);
  torch::Tensor forward(const torch::Tensor& x);  // x + ff(norm(x))
  UMT5FeedForward DenseReluDense{nullptr};
  RMSNorm layer_norm{nullptr};
};
TORCH_MODULE(UMT5FeedForwardLayer);

class UMT5BlockImpl : public torch::nn::Module {
 public:
  explicit UMT5BlockImpl(const UMT5Config& config);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask);
  torch::nn::ModuleList layer{nullptr};  // [UMT5SelfAttentionLayer, UMT5FeedForwardLayer]
};
TORCH_MODULE(UMT5Block);

class UMT5StackImpl : public torch::nn::Module {
 public:
  explicit UMT5StackImpl(const UMT5Config& config);
  // embeds: [batch, seq, d_model]; attention_mask: [batch, seq] (1 = token, 0 = padding) or
  // undefined -> [batch, seq, d_model].
  torch::Tensor forward(const torch::Tensor& embeds, const torch::Tensor& attention_mask);
  torch::nn::ModuleList block{nullptr};
  RMSNorm final_layer_norm{nullptr};
};
TORCH_MODULE(UMT5Stack);

class UMT5EncoderModelImpl : public torch::nn::Module {
 public:
  explicit UMT5EncoderModelImpl(const UMT5Config& config);
  // A Hugging Face directory (config.json + safetensors), weights converted to `dtype` and
  // written once on `device`.
  static std::shared_ptr<UMT5EncoderModelImpl> from_pretrained(const std::filesystem::path& dir,
                                                               torch::ScalarType dtype = torch::kFloat32,
                                                               const c10::Device& device = c10::kCPU);

  // input_ids: [batch, seq] int64; attention_mask: [batch, seq] or undefined (no padding)
  // -> last hidden state [batch, seq, d_model] (padding positions hold values too, as in HF).
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {});

  const UMT5Config& config() const { return config_; }
  torch::nn::Embedding shared{nullptr};  // [vocab, d_model]
  UMT5Stack encoder{nullptr};

 private:
  UMT5Config config_;
};
TORCH_MODULE(UMT5EncoderModel);

}  // namespace mm
