// diffusers' WanTimeTextImageEmbedding: the timestep's sinusoidal embedding through the time MLP
// (kept in fp32, as diffusers keeps time_embedder) and its projection to the 6-way block
// modulation, the text projection, and (I2V/FLF2V) the image embedding.
// Parameter names below condition_embedder.: time_embedder.linear_{1,2}, time_proj,
// text_embedder.linear_{1,2} (weight, bias); image_embedder.norm1, image_embedder.ff.net.0.proj,
// image_embedder.ff.net.2, image_embedder.norm2 (weight, bias), image_embedder.pos_embed.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <optional>

#include "mm/nn/linear.h"
#include "mm/models/wan/wan_layers.h"

namespace mm {

// diffusers' Timesteps(flip_sin_to_cos=True, downscale_freq_shift=0): timesteps [n] (any dtype)
// -> [n, dim] fp32 as [cos, sin] of t * 10000^(-i / (dim / 2)), zero-padded when dim is odd.
torch::Tensor wan_timestep_sinusoid(const torch::Tensor& timesteps, int64_t dim);

// linear_1 -> SiLU -> linear_2 (diffusers' TimestepEmbedding). [..., in] -> [..., dim].
class WanTimestepEmbeddingImpl : public torch::nn::Module {
 public:
  WanTimestepEmbeddingImpl(int64_t in, int64_t dim);
  torch::Tensor forward(const torch::Tensor& x);
  Linear linear_1{nullptr}, linear_2{nullptr};
};
TORCH_MODULE(WanTimestepEmbedding);

// linear_1 -> GELU(tanh) -> linear_2 (diffusers' PixArtAlphaTextProjection). [..., in] -> [..., dim].
class WanTextProjectionImpl : public torch::nn::Module {
 public:
  WanTextProjectionImpl(int64_t in, int64_t dim);
  torch::Tensor forward(const torch::Tensor& x);
  Linear linear_1{nullptr}, linear_2{nullptr};
};
TORCH_MODULE(WanTextProjection);

// diffusers' WanImageEmbedding: [pos_embed] -> FP32LayerNorm -> FeedForward(GELU) -> FP32LayerNorm.
class WanImageEmbeddingImpl : public torch::nn::Module {
 public:
  WanImageEmbeddingImpl(int64_t image_dim, int64_t dim, std::optional<int64_t> pos_embed_seq_len);
  // image: [batch, img, image_dim] -> [batch, img, dim]; with pos_embed (FLF2V) the rows come in
  // (first frame, last frame) pairs: [2 * batch, img, image_dim] -> [batch, 2 * img, dim].
  torch::Tensor forward(const torch::Tensor& image);
  WanFP32LayerNorm norm1{nullptr}, norm2{nullptr};
  WanFeedForward ff{nullptr};
  torch::Tensor pos_embed;  // [1, pos_embed_seq_len, image_dim], undefined without FLF2V
};
TORCH_MODULE(WanImageEmbedding);

struct WanConditions {
  torch::Tensor temb;             // [batch, dim] or per token [batch, tokens, dim], text's dtype
  torch::Tensor timestep_proj;    // [batch, 1, 6, dim] or per token [batch, tokens, 6, dim]
  torch::Tensor text;             // [batch, text_len, dim]
  torch::Tensor image;            // [batch, img, dim] or undefined
};

class WanTimeTextImageEmbeddingImpl : public torch::nn::Module {
 public:
  WanTimeTextImageEmbeddingImpl(int64_t dim, int64_t freq_dim, int64_t text_dim, std::optional<int64_t> image_dim,
                                std::optional<int64_t> pos_embed_seq_len);
  // timestep: [batch] or per token [batch, tokens]; text: [batch, text_len, text_dim];
  // image: see WanImageEmbedding, or undefined.
  WanConditions forward(const torch::Tensor& timestep, const torch::Tensor& text, const torch::Tensor& image);

  WanTimestepEmbedding time_embedder{nullptr};
  Linear time_proj{nullptr};  // [6 * dim, dim]
  WanTextProjection text_embedder{nullptr};
  WanImageEmbedding image_embedder{nullptr};  // null without image_dim

 private:
  int64_t freq_dim_;
};
TORCH_MODULE(WanTimeTextImageEmbedding);

}  // namespace mm
