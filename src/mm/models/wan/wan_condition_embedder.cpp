#include "mm/models/wan/wan_condition_embedder.h"

#include <torch/torch.h>

#include <cmath>

#include "mm/core/error.h"

namespace mm {

torch::Tensor wan_timestep_sinusoid(const torch::Tensor& timesteps, int64_t dim) {
  const int64_t half = dim / 2;
  // fp32 throughout, as diffusers' get_timestep_embedding.
  const auto exponent =
      -std::log(10000.0) * torch::arange(half, torch::TensorOptions().dtype(torch::kFloat32).device(timesteps.device())) /
      static_cast<double>(half);
  const auto args = timesteps.unsqueeze(1).to(torch::kFloat32) * torch::exp(exponent).unsqueeze(0);
  auto emb = torch::cat({torch::cos(args), torch::sin(args)}, -1);
  if (dim % 2 == 1) emb = torch::constant_pad_nd(emb, {0, 1});
  return emb;
}

WanTimestepEmbeddingImpl::WanTimestepEmbeddingImpl(int64_t in, int64_t dim) {
  linear_1 = register_module("linear_1", Linear(in, dim, true));
  linear_2 = register_module("linear_2", Linear(dim, dim, true));
}

torch::Tensor WanTimestepEmbeddingImpl::forward(const torch::Tensor& x) { return linear_2(torch::silu(linear_1(x))); }

WanTextProjectionImpl::WanTextProjectionImpl(int64_t in, int64_t dim) {
  linear_1 = register_module("linear_1", Linear(in, dim, true));
  linear_2 = register_module("linear_2", Linear(dim, dim, true));
}

torch::Tensor WanTextProjectionImpl::forward(const torch::Tensor& x) {
  return linear_2(torch::gelu(linear_1(x), "tanh"));
}

WanImageEmbeddingImpl::WanImageEmbeddingImpl(int64_t image_dim, int64_t dim, std::optional<int64_t> pos_embed_seq_len) {
  // diffusers builds these FP32LayerNorms with LayerNorm's default eps, not the config's.
  norm1 = register_module("norm1", WanFP32LayerNorm(image_dim, 1e-5, true));
  ff = register_module("ff", WanFeedForward(image_dim, image_dim, dim, "none"));
  norm2 = register_module("norm2", WanFP32LayerNorm(dim, 1e-5, true));
  if (pos_embed_seq_len) pos_embed = register_parameter("pos_embed", torch::zeros({1, *pos_embed_seq_len, image_dim}));
}

torch::Tensor WanImageEmbeddingImpl::forward(const torch::Tensor& image) {
  auto x = image;
  if (pos_embed.defined()) {
    MM_CHECK(image.size(0) % 2 == 0 && 2 * image.size(1) == pos_embed.size(1), "Wan image embedding: with pos_embed ",
             "the image features must be [2 * batch, ", pos_embed.size(1) / 2,
             ", image_dim] (first and last frame of each sample), got ", image.sizes());
    x = x.reshape({-1, 2 * image.size(1), image.size(2)}) + pos_embed;
  }
  return norm2(ff(norm1(x)));
}

WanTimeTextImageEmbeddingImpl::WanTimeTextImageEmbeddingImpl(int64_t dim, int64_t freq_dim, int64_t text_dim,
                                                             std::optional<int64_t> image_dim,
                                                             std::optional<int64_t> pos_embed_seq_len)
    : freq_dim_(freq_dim) {
  time_embedder = register_module("time_embedder", WanTimestepEmbedding(freq_dim, dim));
  time_proj = register_module("time_proj", Linear(dim, 6 * dim, true));
  text_embedder = register_module("text_embedder", WanTextProjection(text_dim, dim));
  if (image_dim) image_embedder = register_module("image_embedder", WanImageEmbedding(*image_dim, dim, pos_embed_seq_len));
}

WanConditions WanTimeTextImageEmbeddingImpl::forward(const torch::Tensor& timestep, const torch::Tensor& text,
                                                     const torch::Tensor& image) {
  const int64_t batch = timestep.size(0);
  auto sinusoid = wan_timestep_sinusoid(timestep.flatten(), freq_dim_);
  if (timestep.dim() == 2) sinusoid = sinusoid.unflatten(0, {batch, timestep.size(1)});
  // The time MLP runs in its parameters' dtype (fp32 when loaded as diffusers keeps it), its
  // output in the text's dtype.
  WanConditions c;
  c.temb = time_embedder(sinusoid.to(time_embedder->linear_1->weight.scalar_type())).to(text.scalar_type());
  auto proj = time_proj(torch::silu(c.temb)).unflatten(-1, {6, -1});
  c.timestep_proj = timestep.dim() == 2 ? proj : proj.unsqueeze(1);
  c.text = text_embedder(text);
  if (image.defined()) c.image = image_embedder(image);
  return c;
}

}  // namespace mm
