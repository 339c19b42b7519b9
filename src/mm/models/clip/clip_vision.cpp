#include "mm/models/clip/clip_vision.h"

#include <torch/torch.h>

#include <cmath>

#include "mm/core/error.h"
#include "mm/core/safetensors.h"
#include "mm/nn/parameter_init.h"
#include "mm/nn/weights.h"

namespace mm {
namespace {

torch::nn::LayerNorm layer_norm(const CLIPVisionConfig& config) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.hidden_size}).eps(config.layer_norm_eps));
}

// Checkpoint name -> module name: released checkpoints carry "vision_model.", transformers 5.x
// writes a CLIPVisionModel without it; the parts of a full CLIPModel (or of
// CLIPVisionModelWithProjection) that are not the vision tower are skipped.
std::string checkpoint_to_module(const std::string& name) {
  if (name.rfind("vision_model.", 0) == 0) return name;
  if (name.rfind("text_model.", 0) == 0 || name == "text_projection.weight" || name == "visual_projection.weight" ||
      name == "logit_scale")
    return "";
  for (const char* part : {"embeddings.", "pre_layrnorm.", "encoder.", "post_layernorm."})
    if (name.rfind(part, 0) == 0) return "vision_model." + name;
  return name;  // reported as unexpected by load_weights
}

}  // namespace

CLIPVisionEmbeddingsImpl::CLIPVisionEmbeddingsImpl(const CLIPVisionConfig& config) : config_(config) {
  class_embedding = register_parameter("class_embedding", torch::randn({config.hidden_size}));
  patch_embedding = register_module(
      "patch_embedding", torch::nn::Conv2d(torch::nn::Conv2dOptions(config.num_channels, config.hidden_size,
                                                                    config.patch_size)
                                               .stride(config.patch_size)
                                               .bias(false)));
  position_embedding =
      register_module("position_embedding", embedding(config.num_positions(), config.hidden_size));
}

torch::Tensor CLIPVisionEmbeddingsImpl::forward(const torch::Tensor& pixel_values) {
  MM_CHECK(pixel_values.dim() == 4 && pixel_values.size(1) == config_.num_channels &&
               pixel_values.size(2) == config_.image_size && pixel_values.size(3) == config_.image_size,
           "CLIP vision: pixel_values must be [batch, ", config_.num_channels, ", ", config_.image_size, ", ",
           config_.image_size, "] (the config's image_size; no position interpolation), got ", pixel_values.sizes());
  const auto& weight = patch_embedding->weight;
  const auto patches = patch_embedding(pixel_values.to(weight.device(), weight.scalar_type()))
                           .flatten(2)
                           .transpose(1, 2);  // [batch, grid^2, hidden]
  const auto cls = class_embedding.expand({pixel_values.size(0), 1, -1});
  return torch::cat({cls, patches}, 1) + position_embedding->weight;
}

CLIPAttentionImpl::CLIPAttentionImpl(const CLIPVisionConfig& config) : config_(config) {
  const int64_t d = config.hidden_size;
  k_proj = register_module("k_proj", Linear(d, d, true));
  v_proj = register_module("v_proj", Linear(d, d, true));
  q_proj = register_module("q_proj", Linear(d, d, true));
  out_proj = register_module("out_proj", Linear(d, d, true));
}

torch::Tensor CLIPAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t batch = x.size(0), seq = x.size(1), heads = config_.num_attention_heads;
  auto split = [&](const torch::Tensor& t) { return t.view({batch, seq, heads, config_.head_dim()}).transpose(1, 2); };
  // head_dim ** -0.5 in double, as transformers passes it to SDPA.
  const double scale = std::pow(static_cast<double>(config_.head_dim()), -0.5);
  const auto out = at::scaled_dot_product_attention(split(q_proj(x)), split(k_proj(x)), split(v_proj(x)), {},
                                                    is_training() ? config_.attention_dropout : 0.0,
                                                    /*is_causal=*/false, scale);
  return out_proj(out.transpose(1, 2).reshape({batch, seq, config_.hidden_size}));
}

CLIPEncoderLayerImpl::CLIPEncoderLayerImpl(const CLIPVisionConfig& config) {
  self_attn = register_module("self_attn", CLIPAttention(config));
  layer_norm1 = register_module("layer_norm1", layer_norm(config));
  mlp = register_module("mlp", MLP(config.hidden_size, config.intermediate_size, config.hidden_act));
  layer_norm2 = register_module("layer_norm2", layer_norm(config));
}

torch::Tensor CLIPEncoderLayerImpl::forward(const torch::Tensor& x) {
  const auto h = x + self_attn(layer_norm1(x));
  return h + mlp(layer_norm2(h));
}

CLIPEncoderImpl::CLIPEncoderImpl(const CLIPVisionConfig& config) {
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) layers->push_back(CLIPEncoderLayer(config));
}

CLIPVisionTransformerImpl::CLIPVisionTransformerImpl(const CLIPVisionConfig& config) : config_(config) {
  embeddings = register_module("embeddings", CLIPVisionEmbeddings(config));
  pre_layrnorm = register_module("pre_layrnorm", layer_norm(config));
  encoder = register_module("encoder", CLIPEncoder(config));
  post_layernorm = register_module("post_layernorm", layer_norm(config));
}

CLIPVisionOutput CLIPVisionTransformerImpl::forward(const torch::Tensor& pixel_values, int64_t num_layers) {
  const int64_t total = config_.num_hidden_layers;
  if (num_layers < 0) num_layers = total;
  MM_CHECK(num_layers <= total, "CLIP vision: num_layers=", num_layers, " exceeds num_hidden_layers=", total);
  CLIPVisionOutput out;
  out.hidden_states.reserve(static_cast<size_t>(num_layers + 1));
  out.hidden_states.push_back(pre_layrnorm(embeddings(pixel_values)));
  for (int64_t i = 0; i < num_layers; ++i)
    out.hidden_states.push_back(encoder->layers->ptr<CLIPEncoderLayerImpl>(i)->forward(out.hidden_states.back()));
  out.last_hidden_state = out.hidden_states.back();
  if (num_layers == total) out.pooler_output = post_layernorm(out.last_hidden_state.select(1, 0));
  return out;
}

CLIPVisionModelImpl::CLIPVisionModelImpl(const CLIPVisionConfig& config) : config_(config) {
  config.validate();
  vision_model = register_module("vision_model", CLIPVisionTransformer(config));
}

std::shared_ptr<CLIPVisionModelImpl> CLIPVisionModelImpl::from_pretrained(const std::filesystem::path& dir,
                                                                         torch::ScalarType dtype, const c10::Device& device) {
  MM_CHECK(std::filesystem::is_directory(dir), "CLIP vision from_pretrained: ", dir.string(), " is not a directory");
  const auto config = CLIPVisionConfig::from_file(dir / "config.json");
  auto model = build_for_loading(dtype, device, [&] { return std::make_shared<CLIPVisionModelImpl>(config); });
  WeightLoadOptions options;
  options.checkpoint_to_module = checkpoint_to_module;
  load_weights(*model, Checkpoint::open(dir), options);
  model->eval();
  return model;
}

CLIPVisionOutput CLIPVisionModelImpl::forward(const torch::Tensor& pixel_values) {
  return vision_model(pixel_values);
}

torch::Tensor CLIPVisionModelImpl::penultimate_hidden_state(const torch::Tensor& pixel_values) {
  return vision_model(pixel_values, config_.num_hidden_layers - 1).last_hidden_state;
}

}  // namespace mm
