#include "mm/nn/compute_dtype.h"
#include "mm/models/wan/wan_transformer.h"

#include <torch/torch.h>

#include <cmath>

#include "mm/core/error.h"
#include "mm/nn/parameter_init.h"
#include "mm/nn/weights.h"
#include "mm/models/wan/wan_block.h"
#include "mm/models/wan/wan_condition_bridge.h"
#include "mm/models/wan/wan_rotary.h"
#include "mm/models/wan/wan_transformer_weights.h"

namespace mm {

WanTransformer3DModelImpl::WanTransformer3DModelImpl(const WanTransformerConfig& config) : config_(config) {
  config.validate();
  const int64_t dim = config.inner_dim();
  const auto& p = config.patch_size;
  patch_embedding = register_module(
      "patch_embedding",
      torch::nn::Conv3d(torch::nn::Conv3dOptions(config.in_channels, dim, {p[0], p[1], p[2]}).stride({p[0], p[1], p[2]})));
  condition_embedder = register_module(
      "condition_embedder",
      WanTimeTextImageEmbedding(dim, config.freq_dim, config.text_dim, config.image_dim, config.pos_embed_seq_len));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.num_layers; ++i) blocks->push_back(WanTransformerBlock(config));
  norm_out = register_module("norm_out", WanFP32LayerNorm(dim, config.eps, false));
  proj_out = register_module("proj_out", Linear(dim, config.out_channels * config.patch_volume(), true));
  scale_shift_table =
      register_parameter("scale_shift_table", torch::randn({1, 2, dim}) / std::sqrt(static_cast<double>(dim)));
}

namespace {

// Built in `dtype` on `device` without random init, with the parameters diffusers keeps in fp32
// made fp32.
std::shared_ptr<WanTransformer3DModelImpl> build_unloaded(const WanTransformerConfig& config, torch::ScalarType dtype,
                                                          const c10::Device& device) {
  auto model = build_for_loading(dtype, device, [&] { return std::make_shared<WanTransformer3DModelImpl>(config); });
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters())
    if (wan_keeps_fp32(p.key())) p.value().set_data(p.value().to(torch::kFloat32));
  return model;
}

WeightLoadOptions diffusers_load_options() {
  WeightLoadOptions options;
  options.checkpoint_to_module = [](const std::string& name) -> std::string {
    return name.find("norm_added_q") == std::string::npos ? name : "";
  };
  return options;
}

}  // namespace

std::shared_ptr<WanTransformer3DModelImpl> WanTransformer3DModelImpl::from_pretrained(const std::filesystem::path& dir,
                                                                                     torch::ScalarType dtype, const c10::Device& device) {
  MM_CHECK(std::filesystem::is_directory(dir), "Wan transformer from_pretrained: ", dir.string(), " is not a directory");
  auto model = build_unloaded(WanTransformerConfig::from_file(dir / "config.json"), dtype, device);
  const auto weights = read_diffusers_weights(dir);
  load_weights(*model, weights.tensors, weights.source, diffusers_load_options());
  model->eval();
  return model;
}

std::pair<std::shared_ptr<WanTransformer3DModelImpl>, std::vector<std::pair<std::string, torch::Tensor>>>
WanTransformer3DModelImpl::from_pretrained_unloaded(const std::filesystem::path& dir, torch::ScalarType dtype) {
  MM_CHECK(std::filesystem::is_directory(dir), "Wan transformer from_pretrained: ", dir.string(), " is not a directory");
  auto model = build_unloaded(WanTransformerConfig::from_file(dir / "config.json"), dtype, c10::kCPU);
  const auto weights = read_diffusers_weights(dir);
  auto matched = match_weights(*model, weights.tensors, weights.source, diffusers_load_options());
  model->eval();
  return {model, std::move(matched)};
}

torch::Tensor WanTransformer3DModelImpl::forward(const torch::Tensor& latents, const torch::Tensor& timestep,
                                                 const torch::Tensor& text, const torch::Tensor& image_embeds) {
  const auto& c = config_;
  const auto& p = c.patch_size;
  MM_CHECK(latents.dim() == 5 && latents.size(1) == c.in_channels, "Wan transformer: latents must be [batch, ",
           c.in_channels, ", frames, height, width], got ", latents.sizes());
  const int64_t batch = latents.size(0);
  const int64_t frames = latents.size(2) / p[0], height = latents.size(3) / p[1], width = latents.size(4) / p[2];
  MM_CHECK(latents.size(2) % p[0] == 0 && latents.size(3) % p[1] == 0 && latents.size(4) % p[2] == 0,
           "Wan transformer: latent frames/height/width ", latents.sizes().slice(2),
           " must be divisible by patch_size (", p[0], ", ", p[1], ", ", p[2], ")");
  const int64_t tokens = frames * height * width;
  MM_CHECK((timestep.dim() == 1 && timestep.size(0) == batch) ||
               (timestep.dim() == 2 && timestep.size(0) == batch && timestep.size(1) == tokens),
           "Wan transformer: timestep must be [", batch, "] or per token [", batch, ", ", tokens, "], got ",
           timestep.sizes());
  MM_CHECK(text.dim() == 3 && text.size(0) == batch && text.size(2) == c.text_dim,
           "Wan transformer: text must be [", batch, ", text_len, ", c.text_dim, "], got ", text.sizes());
  if (c.image_dim) {
    const int64_t rows = c.pos_embed_seq_len ? 2 * batch : batch;
    MM_CHECK(image_embeds.defined() && image_embeds.dim() == 3 && image_embeds.size(0) == rows &&
                 image_embeds.size(2) == *c.image_dim,
             "Wan transformer: image_embeds must be [", rows, ", img, ", *c.image_dim, "] for this image-conditioned ",
             "model, got ", image_embeds.defined() ? c10::str(image_embeds.sizes()) : "none");
  } else {
    MM_CHECK(!image_embeds.defined(), "Wan transformer: image_embeds given to a model without image_dim");
  }

  const auto device = patch_embedding->weight.device();
  const auto dtype = patch_embedding->weight.scalar_type();
  auto to_model = [&](const torch::Tensor& t) { return t.defined() ? t.to(device, dtype) : t; };
  auto rotary = wan_rotary_tables(c.attention_head_dim, frames, height, width, c.rope_max_seq_len, device);

  auto h = patch_embedding(to_model(latents)).flatten(2).transpose(1, 2).contiguous();  // [batch, tokens, dim]
  auto cond = condition_embedder(timestep.to(device), to_model(text), to_model(image_embeds));
  // Context parallelism: from here on this rank's tokens only (per-token conditioning too).
  const auto split = context_parallel ? context_parallel({0, tokens}, /*causal=*/false) : nullptr;
  if (split) {
    h = split->take(h, 1);
    rotary = {split->take(rotary.cos, 1), split->take(rotary.sin, 1)};
    if (cond.timestep_proj.size(1) == tokens) cond.timestep_proj = split->take(cond.timestep_proj, 1);
    if (cond.temb.dim() == 3) cond.temb = split->take(cond.temb, 1);
  }
  const SequenceSplit* self_split = split.get();

  // diffusers concatenates image and text tokens; the cross-attention splits them again.
  const int64_t image_tokens = cond.image.defined() ? cond.image.size(1) : 0;
  const auto context = image_tokens > 0 ? torch::cat({cond.image, cond.text}, 1) : cond.text;
  if (!block_runner) {
    for (const auto& item : *blocks)
      h = item->as<WanTransformerBlock>()->forward(h, context, image_tokens, cond.timestep_proj, rotary, self_split);
  } else {
    const auto bridge = wan_condition_bridge(h, {context, cond.timestep_proj});
    const auto& block_context = bridge.leaves[0];
    const auto& timestep_proj = bridge.leaves[1];
    h = bridge.input;
    for (const auto& item : *blocks) {
      auto* block = item->as<WanTransformerBlock>();
      // The runner may call `run` again in backward, after this frame is gone: capture by value.
      h = block_runner(
          *block,
          [block, block_context, image_tokens, timestep_proj, rotary, split](const torch::Tensor& x) {
            return block->forward(x, block_context, image_tokens, timestep_proj, rotary, split.get());
          },
          h);
    }
  }

  // Output modulation: scale_shift_table (fp32) + temb, [batch, 1 or tokens, 2, dim].
  const auto temb = cond.temb.dim() == 2 ? cond.temb.unsqueeze(1) : cond.temb;
  const auto modulation = scale_shift_table.unsqueeze(0) + temb.unsqueeze(2);
  h = (norm_out(h.to(at_least_fp32(h.scalar_type()))) * (1 + modulation.select(2, 1)) + modulation.select(2, 0)).to(h.scalar_type());
  h = proj_out(h);
  if (split) h = split->gather(h, 1);
  // [batch, tokens, pt * ph * pw * out] -> [batch, out, frames * pt, height * ph, width * pw].
  h = h.reshape({batch, frames, height, width, p[0], p[1], p[2], -1}).permute({0, 7, 1, 4, 2, 5, 3, 6});
  return h.flatten(6, 7).flatten(4, 5).flatten(2, 3);
}

}  // namespace mm
