// The Wan DiT (diffusers' WanTransformer3DModel) of Wan2.1 T2V/I2V/FLF2V and Wan2.2 T2V/I2V/TI2V:
// a Conv3d patch embedding, num_layers WanTransformerBlocks conditioned on the timestep
// (modulation), the text (cross-attention) and optionally CLIP image features (added k/v), a
// modulated output norm and projection, unpatchified back to a latent video.
// Parameter names as the diffusers checkpoint: patch_embedding.{weight,bias},
// condition_embedder.* (wan_condition_embedder.h), blocks.N.* (wan_block.h), proj_out.{weight,bias},
// scale_shift_table [1, 2, dim]. Checkpoint tensors named norm_added_q are skipped, as diffusers
// skips them.
//
// Deviations from diffusers, on inputs diffusers mishandles: the cross-attention splits image from
// text tokens by the image token count (diffusers assumes exactly 512 text tokens, which the Wan
// pipelines always pass); latent sizes not divisible by the patch size, a missing image for an
// image-conditioned model and image features for a text-only model are refused.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

#include <filesystem>

#include "mm/nn/block_runner.h"
#include "mm/nn/sequence_split.h"
#include "mm/nn/linear.h"
#include "mm/models/wan/wan_condition_embedder.h"
#include "mm/models/wan/wan_layers.h"
#include "mm/models/wan/wan_transformer_config.h"

namespace mm {

class WanTransformer3DModelImpl : public torch::nn::Module {
 public:
  explicit WanTransformer3DModelImpl(const WanTransformerConfig& config);

  // A diffusers directory (config.json + diffusion_pytorch_model*.safetensors). Weights are
  // converted to `dtype`, except those diffusers keeps in fp32 (time_embedder, scale_shift_table,
  // norm1/2/3; see wan_keeps_fp32), each written once on `device`. Missing, unexpected or
  // mis-shaped tensors fail by name.
  static std::shared_ptr<WanTransformer3DModelImpl> from_pretrained(const std::filesystem::path& dir,
                                                                    torch::ScalarType dtype = torch::kFloat32,
                                                                    const c10::Device& device = c10::kCPU);
  // The same model built on the CPU without its weights (storage allocated, never written), and
  // the checkpoint's tensors by parameter name, checked and still views of the mapped files: for
  // sharded training, where each rank copies only the rows it keeps (parallel/fully_shard.h).
  static std::pair<std::shared_ptr<WanTransformer3DModelImpl>, std::vector<std::pair<std::string, torch::Tensor>>>
  from_pretrained_unloaded(const std::filesystem::path& dir, torch::ScalarType dtype = torch::kFloat32);

  // latents: [batch, in_channels, frames, height, width] (each divisible by its patch size);
  // timestep: [batch], or per token [batch, tokens] with tokens = the patch grid's size in
  // (frame, height, width) order (Wan2.2 TI2V); text: [batch, text_len, text_dim];
  // image_embeds: [batch, img, image_dim] (I2V), [2 * batch, img, image_dim] as (first, last)
  // frame pairs with 2 * img = pos_embed_seq_len (FLF2V), or undefined (no image_dim)
  // -> [batch, out_channels, frames, height, width] in the model's dtype. Inputs are moved to the
  // patch embedding's device and dtype.
  torch::Tensor forward(const torch::Tensor& latents, const torch::Tensor& timestep, const torch::Tensor& text,
                        const torch::Tensor& image_embeds = {});

  // Called once per block instead of the block itself when set (recompute, FSDP). Conditioning
  // tensors that need gradients still get them (wan_condition_bridge.h).
  BlockRunner block_runner;
  // Context parallelism, when set: each rank runs the blocks on its part of the video tokens (a
  // contiguous split; the self-attention over all of them through the split; the cross-attention
  // to the text, the modulation and the feed-forward need nothing of the others) with the rotary
  // tables computed for the whole grid and sliced with the tokens; the output is gathered whole,
  // so every rank returns the same. The batch must be the same on every rank of the split.
  SequenceSplitter context_parallel;
  const WanTransformerConfig& config() const { return config_; }

  torch::nn::Conv3d patch_embedding{nullptr};  // weight [dim, in_channels, pt, ph, pw], bias [dim]
  WanTimeTextImageEmbedding condition_embedder{nullptr};
  torch::nn::ModuleList blocks{nullptr};  // [WanTransformerBlock] x num_layers
  WanFP32LayerNorm norm_out{nullptr};     // no affine
  Linear proj_out{nullptr};               // [out_channels * pt * ph * pw, dim]
  torch::Tensor scale_shift_table;        // [1, 2, dim]: shift, scale of the output norm

 private:
  WanTransformerConfig config_;
};
TORCH_MODULE(WanTransformer3DModel);

}  // namespace mm
