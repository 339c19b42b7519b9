// The CLIP vision tower (transformers 5.17's CLIPVisionModel): a patch-embedding conv (no bias),
// a learned class token and absolute position embeddings, pre_layrnorm, num_hidden_layers pre-norm
// encoder layers (self-attention with biased q/k/v/out projections via SDPA, then an fc1 ->
// quick_gelu/gelu -> fc2 MLP), and post_layernorm on the class token (the pooled output).
// Wan2.1-I2V conditions on hidden_states[-2], the output of the second-to-last layer.
//
// Parameter names as released checkpoints (e.g. Wan2.1-I2V's image_encoder):
// vision_model.embeddings.{class_embedding, patch_embedding.weight, position_embedding.weight},
// vision_model.pre_layrnorm.{weight,bias},
// vision_model.encoder.layers.N.{layer_norm1, layer_norm2}.{weight,bias},
// vision_model.encoder.layers.N.self_attn.{q_proj,k_proj,v_proj,out_proj}.{weight,bias},
// vision_model.encoder.layers.N.mlp.{fc1,fc2}.{weight,bias}, vision_model.post_layernorm.{weight,bias}.
// from_pretrained also reads the names without "vision_model." (as transformers 5.x's
// save_pretrained writes a CLIPVisionModel) and skips the text tower and projections of a full
// CLIPModel / CLIPVisionModelWithProjection checkpoint.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <filesystem>
#include <vector>

#include "mm/nn/linear.h"
#include "mm/nn/mlp.h"
#include "mm/models/clip/clip_vision_config.h"

namespace mm {

class CLIPVisionEmbeddingsImpl : public torch::nn::Module {
 public:
  explicit CLIPVisionEmbeddingsImpl(const CLIPVisionConfig& config);
  // pixel_values: [batch, num_channels, image_size, image_size] (any float dtype; cast to the
  // weights') -> [batch, 1 + grid^2, hidden]: the class token, then the patches row-major.
  torch::Tensor forward(const torch::Tensor& pixel_values);

  torch::Tensor class_embedding;                  // [hidden]
  torch::nn::Conv2d patch_embedding{nullptr};     // weight [hidden, num_channels, patch, patch]
  torch::nn::Embedding position_embedding{nullptr};  // [1 + grid^2, hidden]

 private:
  CLIPVisionConfig config_;
};
TORCH_MODULE(CLIPVisionEmbeddings);

class CLIPAttentionImpl : public torch::nn::Module {
 public:
  explicit CLIPAttentionImpl(const CLIPVisionConfig& config);
  torch::Tensor forward(const torch::Tensor& x);  // [batch, seq, hidden] -> [batch, seq, hidden]
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, out_proj{nullptr};  // [hidden, hidden] + bias

 private:
  CLIPVisionConfig config_;
};
TORCH_MODULE(CLIPAttention);

class CLIPEncoderLayerImpl : public torch::nn::Module {
 public:
  explicit CLIPEncoderLayerImpl(const CLIPVisionConfig& config);
  // x + attn(norm1(x)), then h + mlp(norm2(h)): [batch, seq, hidden] -> [batch, seq, hidden].
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::LayerNorm layer_norm1{nullptr}, layer_norm2{nullptr};  // weight, bias [hidden]
  CLIPAttention self_attn{nullptr};
  MLP mlp{nullptr};  // fc1 -> quick_gelu / gelu -> fc2
};
TORCH_MODULE(CLIPEncoderLayer);

class CLIPEncoderImpl : public torch::nn::Module {
 public:
  explicit CLIPEncoderImpl(const CLIPVisionConfig& config);
  torch::nn::ModuleList layers{nullptr};  // num_hidden_layers CLIPEncoderLayer
};
TORCH_MODULE(CLIPEncoder);

// What transformers' CLIPVisionModel returns with output_hidden_states=True.
struct CLIPVisionOutput {
  // num_hidden_layers + 1 entries, each [batch, seq, hidden] (seq = 1 + grid^2): [0] the
  // embeddings after pre_layrnorm, [i] the output of layer i. [-2] is what Wan2.1-I2V uses.
  std::vector<torch::Tensor> hidden_states;
  torch::Tensor last_hidden_state;  // [batch, seq, hidden], equal to hidden_states.back() (no final norm)
  torch::Tensor pooler_output;      // [batch, hidden]: post_layernorm(last_hidden_state[:, 0])
};

// The tower itself (the "vision_model" of CLIPModel and of released CLIPVisionModel checkpoints).
class CLIPVisionTransformerImpl : public torch::nn::Module {
 public:
  explicit CLIPVisionTransformerImpl(const CLIPVisionConfig& config);
  // pixel_values: [batch, num_channels, image_size, image_size]; runs the first `num_layers`
  // encoder layers (all when negative). hidden_states gets num_layers + 1 entries; the pooled
  // output is computed only when all layers ran (it is undefined otherwise).
  CLIPVisionOutput forward(const torch::Tensor& pixel_values, int64_t num_layers = -1);

  CLIPVisionEmbeddings embeddings{nullptr};
  torch::nn::LayerNorm pre_layrnorm{nullptr};  // (sic) the checkpoint's spelling; weight, bias [hidden]
  CLIPEncoder encoder{nullptr};
  torch::nn::LayerNorm post_layernorm{nullptr};  // weight, bias [hidden]

 private:
  CLIPVisionConfig config_;
};
TORCH_MODULE(CLIPVisionTransformer);

class CLIPVisionModelImpl : public torch::nn::Module {
 public:
  explicit CLIPVisionModelImpl(const CLIPVisionConfig& config);
  // A Hugging Face directory (config.json + safetensors), weights converted to `dtype` and
  // written once on `device`; in eval mode.
  static std::shared_ptr<CLIPVisionModelImpl> from_pretrained(const std::filesystem::path& dir,
                                                              torch::ScalarType dtype = torch::kFloat32,
                                                              const c10::Device& device = c10::kCPU);

  // pixel_values: [batch, num_channels, image_size, image_size] as CLIPImageProcessor makes them.
  CLIPVisionOutput forward(const torch::Tensor& pixel_values);
  // hidden_states[-2] of forward(), [batch, seq, hidden] — Wan2.1-I2V's image embedding. The last
  // layer and the pooling are skipped, since they do not contribute to it.
  torch::Tensor penultimate_hidden_state(const torch::Tensor& pixel_values);

  const CLIPVisionConfig& config() const { return config_; }
  CLIPVisionTransformer vision_model{nullptr};

 private:
  CLIPVisionConfig config_;
};
TORCH_MODULE(CLIPVisionModel);

}  // namespace mm
