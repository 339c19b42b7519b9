#include "mm/models/qwen3_vl/qwen3_vl_vision.h"

#include <torch/torch.h>

#include <algorithm>

#include "mm/core/error.h"
#include "mm/core/host_to_device.h"
#include "mm/models/qwen2_5_vl/qwen2_5_vl_vision_layout.h"
#include "mm/models/qwen3_vl/qwen3_vl_position_taps.h"
#include "mm/nn/rotary_2d.h"
#include "mm/nn/varlen_attention.h"

namespace mm {
namespace {

Qwen2_5_VLVisionConfig shared_parts_of(const Qwen3VLVisionConfig& c) {
  return patch_and_attention_shape(c.hidden_size, c.num_heads, c.in_channels, c.patch_size, c.temporal_patch_size);
}

}  // namespace

Qwen3VLVisionBlockImpl::Qwen3VLVisionBlockImpl(const Qwen3VLVisionConfig& c) {
  norm1 = register_module("norm1", vision_layer_norm(c.hidden_size));
  norm2 = register_module("norm2", vision_layer_norm(c.hidden_size));
  attn = register_module("attn", Qwen2_5_VLVisionAttention(shared_parts_of(c)));
  mlp = register_module("mlp", MLP(c.hidden_size, c.intermediate_size, c.hidden_act, "linear_fc1", "linear_fc2"));
}

torch::Tensor Qwen3VLVisionBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                              const VarlenSegments& segments) {
  const torch::Tensor h = x + attn(norm1(x), cos, sin, segments);
  return h + mlp(norm2(h));
}

Qwen3VLPatchMergerImpl::Qwen3VLPatchMergerImpl(const Qwen3VLVisionConfig& c, bool postshuffle_norm)
    : postshuffle_norm_(postshuffle_norm), merged_dim_(c.hidden_size * c.spatial_merge_size * c.spatial_merge_size) {
  norm = register_module("norm", vision_layer_norm(postshuffle_norm ? merged_dim_ : c.hidden_size));
  linear_fc1 = register_module("linear_fc1", Linear(merged_dim_, merged_dim_, /*bias=*/true));
  linear_fc2 = register_module("linear_fc2", Linear(merged_dim_, c.out_hidden_size, /*bias=*/true));
}

torch::Tensor Qwen3VLPatchMergerImpl::forward(const torch::Tensor& x) {
  const torch::Tensor merged = postshuffle_norm_ ? norm(x.reshape({-1, merged_dim_})) : norm(x).reshape({-1, merged_dim_});
  return linear_fc2(torch::gelu(linear_fc1(merged)));
}

Qwen3VLVisionModelImpl::Qwen3VLVisionModelImpl(const Qwen3VLVisionConfig& config) : config_(config) {
  config_.validate();
  patch_embed = register_module("patch_embed", Qwen2_5_VisionPatchEmbed(shared_parts_of(config_), /*bias=*/true));
  pos_embed = register_module("pos_embed", torch::nn::Embedding(config_.num_position_embeddings, config_.hidden_size));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < config_.depth; ++i) blocks->push_back(Qwen3VLVisionBlock(config_));
  merger = register_module("merger", Qwen3VLPatchMerger(config_, /*postshuffle_norm=*/false));
  deepstack_merger_list = register_module("deepstack_merger_list", torch::nn::ModuleList());
  for (size_t i = 0; i < config_.deepstack_visual_indexes.size(); ++i)
    deepstack_merger_list->push_back(Qwen3VLPatchMerger(config_, /*postshuffle_norm=*/true));
  inv_freq_ = axial_rope_inv_freq(config_.head_dim(), config_.rope_theta);
}

torch::Tensor Qwen3VLVisionModelImpl::position_embeddings(const std::vector<std::array<int64_t, 3>>& grid,
                                                          const torch::Tensor& like) {
  const PositionTaps taps = qwen3_vl_position_taps(grid, config_.num_grid_per_side(), config_.spatial_merge_size);
  const torch::Device device = like.device();
  // The table's rows in its own dtype times fp32 weights: the products and their sum are fp32 in
  // every dtype (type promotion, as in the reference), rounded once to the activations' dtype.
  const torch::Tensor rows = pos_embed(to_device_async(taps.indices, device));
  return (rows * to_device_async(taps.weights, device).unsqueeze(-1)).sum(1).to(like.scalar_type());
}

VisionFeatures Qwen3VLVisionModelImpl::features(const torch::Tensor& pixel_values,
                                                                   const torch::Tensor& grid_thw) {
  const auto grid = vision_grid_of(grid_thw, "Qwen3-VL vision");
  // Positions and per-frame segments are Qwen2.5-VL's layout (no windows in Qwen3-VL).
  const Qwen2_5_VisionLayout layout = qwen2_5_vision_layout(grid, config_.spatial_merge_size, 1);
  MM_CHECK(pixel_values.defined() && pixel_values.dim() == 2 && pixel_values.size(0) == layout.num_patches,
           "Qwen3-VL vision: grid_thw accounts for ", layout.num_patches, " patches (sum of t*h*w) but pixel_values has ",
           pixel_values.defined() && pixel_values.dim() > 0 ? c10::str(pixel_values.size(0), " rows")
                                                            : std::string("no rows"));
  const torch::Device device = pixel_values.device();
  torch::Tensor hidden = patch_embed(pixel_values);
  hidden = hidden + position_embeddings(grid, hidden);
  const torch::Tensor positions = host_values_on(layout.position_ids, device).view({layout.num_patches, 2});
  const auto [cos, sin] = axial_rope_cos_sin(positions, to_device_async(inv_freq_, device));
  const VarlenSegments frames(layout.cu_seqlens, device);

  VisionFeatures out;
  const auto& deepstack_at = config_.deepstack_visual_indexes;
  for (size_t i = 0; i < blocks->size(); ++i) {
    auto* block = blocks->ptr<Qwen3VLVisionBlockImpl>(i).get();
    if (!block_runner) {
      hidden = block->forward(hidden, cos, sin, frames);
    } else {
      // The runner may call `run` again in backward, after this frame is gone: capture by value.
      hidden = block_runner(
          *block, [block, cos, sin, frames](const torch::Tensor& x) { return block->forward(x, cos, sin, frames); },
          hidden);
    }
    const auto at = std::find(deepstack_at.begin(), deepstack_at.end(), static_cast<int64_t>(i));
    if (at != deepstack_at.end())
      out.deepstack.push_back(
          deepstack_merger_list->ptr<Qwen3VLPatchMergerImpl>(static_cast<size_t>(at - deepstack_at.begin()))
              ->forward(hidden));
  }
  out.merged = merger(hidden);
  return out;
}

torch::Tensor Qwen3VLVisionModelImpl::forward(const torch::Tensor& pixel_values, const torch::Tensor& grid_thw) {
  return features(pixel_values, grid_thw).merged;
}

}  // namespace mm
