#include "mm/models/wan/wan_vae.h"

#include <torch/torch.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "mm/core/error.h"
#include "mm/core/host_to_device.h"
#include "mm/core/json_config.h"
#include "mm/core/safetensors.h"
#include "mm/nn/compute_dtype.h"
#include "mm/nn/parameter_init.h"
#include "mm/nn/weights.h"

namespace mm {
namespace {

namespace fs = std::filesystem;

// diffusers chunks videos as the first frame, then 4 frames at a time, whatever the compression.
constexpr int64_t kChunkFrames = 4;

// diffusers' blend_v / blend_h: the first `extent` rows (columns) of b fade in linearly over the
// last rows (columns) of a; b is changed in place, as diffusers does, so that later tiles blend
// against already blended neighbours.
void blend(const torch::Tensor& a, torch::Tensor& b, int64_t extent, int64_t dim) {
  extent = std::min({a.size(dim), b.size(dim), extent});
  for (int64_t y = 0; y < extent; ++y) {
    const double w = static_cast<double>(y) / static_cast<double>(extent);
    b.select(dim, y).copy_(a.select(dim, a.size(dim) - extent + y) * (1 - w) + b.select(dim, y) * w);
  }
}

// Blends a grid of overlapping tiles ([B, C, T, h_i, w_j]) and crops each to the stride.
torch::Tensor blend_tiles(std::vector<std::vector<torch::Tensor>>& rows, int64_t blend_height, int64_t blend_width,
                          int64_t stride_height, int64_t stride_width, int64_t height, int64_t width) {
  std::vector<torch::Tensor> result_rows;
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<torch::Tensor> result_row;
    for (size_t j = 0; j < rows[i].size(); ++j) {
      auto& tile = rows[i][j];
      if (i > 0) blend(rows[i - 1][j], tile, blend_height, 3);
      if (j > 0) blend(rows[i][j - 1], tile, blend_width, 4);
      result_row.push_back(tile.slice(3, 0, stride_height).slice(4, 0, stride_width));
    }
    result_rows.push_back(torch::cat(result_row, -1));
  }
  return torch::cat(result_rows, 3).slice(3, 0, height).slice(4, 0, width);
}

LatentDistribution distribution(const torch::Tensor& moments) {
  const auto parts = moments.chunk(2, 1);
  return {parts[0], torch::clamp(parts[1], -30.0, 20.0)};
}

// Loads a diffusers directory: diffusion_pytorch_model.safetensors, its sharded form with
// diffusion_pytorch_model.safetensors.index.json, or (converted checkpoints) model.safetensors.
void load_diffusers_weights(torch::nn::Module& module, const fs::path& dir) {
  const fs::path index = dir / "diffusion_pytorch_model.safetensors.index.json";
  const fs::path single = dir / "diffusion_pytorch_model.safetensors";
  if (!fs::exists(index)) {
    load_weights(module, Checkpoint::open(fs::exists(single) ? single : dir));
    return;
  }
  const auto json = read_json_file(index);
  MM_CHECK(json.contains("weight_map") && json["weight_map"].is_object(), index.string(),
           ": missing object 'weight_map'");
  std::vector<std::string> shards;
  for (const auto& [name, shard] : json["weight_map"].items()) {
    MM_CHECK(shard.is_string(), index.string(), ": weight_map['", name, "'] is not a file name");
    if (std::find(shards.begin(), shards.end(), shard.get<std::string>()) == shards.end())
      shards.push_back(shard.get<std::string>());
  }
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& shard : shards) {
    MM_CHECK(fs::exists(dir / shard), index.string(), " lists shard ", shard, " which does not exist");
    const auto file = SafetensorsFile::open(dir / shard);
    for (const auto& name : file->names()) tensors.emplace_back(name, file->tensor(name));
  }
  load_weights(module, tensors, index.string());
}

}  // namespace

torch::Tensor LatentDistribution::sample(const std::optional<at::Generator>& generator) const {
  const auto std = torch::exp(0.5 * logvar);
  torch::Tensor noise;
  if (generator) {
    // diffusers' randn_tensor draws on the generator's device and moves the noise to the latents'.
    noise = at::randn(mean.sizes(), *generator, mean.options().device(generator->device())).to(mean.device());
  } else {
    noise = torch::randn(mean.sizes(), mean.options());
  }
  return mean + std * noise;
}

torch::Tensor wan_patchify(const torch::Tensor& x, int64_t p) {
  if (p == 1) return x;
  MM_CHECK(x.dim() == 5 && x.size(3) % p == 0 && x.size(4) % p == 0,
           "Wan VAE patchify: expected [B, C, F, H, W] with H and W divisible by ", p, ", got ", x.sizes());
  const int64_t b = x.size(0), c = x.size(1), f = x.size(2), h = x.size(3) / p, w = x.size(4) / p;
  return x.view({b, c, f, h, p, w, p}).permute({0, 1, 6, 4, 2, 3, 5}).contiguous().view({b, c * p * p, f, h, w});
}

torch::Tensor wan_unpatchify(const torch::Tensor& x, int64_t p) {
  if (p == 1) return x;
  MM_CHECK(x.dim() == 5 && x.size(1) % (p * p) == 0,
           "Wan VAE unpatchify: expected [B, C * ", p * p, ", F, H, W], got ", x.sizes());
  const int64_t b = x.size(0), c = x.size(1) / (p * p), f = x.size(2), h = x.size(3), w = x.size(4);
  return x.view({b, c, p, p, f, h, w}).permute({0, 1, 4, 5, 3, 6, 2}).contiguous().view({b, c, f, h * p, w * p});
}

WanVAEImpl::WanVAEImpl(const WanVAEConfig& config) : config_(config) {
  config.validate();
  encoder = register_module("encoder", WanEncoder3d(config));
  quant_conv = register_module("quant_conv", WanCausalConv3d(config.z_dim * 2, config.z_dim * 2, 1));
  post_quant_conv = register_module("post_quant_conv", WanCausalConv3d(config.z_dim, config.z_dim, 1));
  decoder = register_module("decoder", WanDecoder3d(config));
}

std::shared_ptr<WanVAEImpl> WanVAEImpl::from_pretrained(const fs::path& dir, torch::ScalarType dtype, const c10::Device& device) {
  MM_CHECK(fs::is_directory(dir), "Wan VAE from_pretrained: ", dir.string(), " is not a directory");
  const auto config = WanVAEConfig::from_file(dir / "config.json");
  auto model = build_for_loading(dtype, device, [&] { return std::make_shared<WanVAEImpl>(config); });
  load_diffusers_weights(*model, dir);
  model->eval();
  return model;
}

void WanVAEImpl::check_video(const torch::Tensor& video) const {
  const int64_t s = config_.spatial_compression();
  MM_CHECK(video.dim() == 5 && video.size(1) == config_.video_channels(), "Wan VAE encode: expected a video [B, ",
           config_.video_channels(), ", F, H, W], got ", video.sizes());
  // diffusers would silently drop the last (F - 1) % 4 frames.
  MM_CHECK(video.size(2) >= 1 && (video.size(2) - 1) % kChunkFrames == 0, "Wan VAE encode: ", video.size(2),
           " frames; expected 1 + 4k (the first frame, then chunks of 4)");
  MM_CHECK(video.size(3) > 0 && video.size(4) > 0 && video.size(3) % s == 0 && video.size(4) % s == 0,
           "Wan VAE encode: height ", video.size(3), " and width ", video.size(4),
           " must be positive multiples of the spatial compression ", s);
}

void WanVAEImpl::check_latents(const torch::Tensor& latents) const {
  MM_CHECK(latents.dim() == 5 && latents.size(1) == config_.z_dim && latents.size(2) >= 1,
           "Wan VAE decode: expected latents [B, z_dim = ", config_.z_dim, ", F' >= 1, h, w], got ", latents.sizes());
}

void WanVAEImpl::check_tiling(const WanVAETiling& t) const {
  const int64_t s = config_.spatial_compression();
  auto check = [&](const char* name, int64_t min, int64_t stride) {
    MM_CHECK(min > 0 && stride > 0 && stride <= min && min % s == 0 && stride % s == 0, "Wan VAE tiling: ",
             name, " min ", min, " and stride ", stride, " must be positive multiples of the spatial compression ",
             s, " with stride <= min");
  };
  check("tile_sample_{min,stride}_height:", t.tile_sample_min_height, t.tile_sample_stride_height);
  check("tile_sample_{min,stride}_width:", t.tile_sample_min_width, t.tile_sample_stride_width);
}

torch::Tensor WanVAEImpl::encode_chunks(const torch::Tensor& x) {
  WanFeatureCache cache;
  std::vector<torch::Tensor> outs;
  const int64_t chunks = 1 + (x.size(2) - 1) / kChunkFrames;
  for (int64_t i = 0; i < chunks; ++i) {
    cache.start_chunk();
    const auto chunk = i == 0 ? x.slice(2, 0, 1) : x.slice(2, 1 + kChunkFrames * (i - 1), 1 + kChunkFrames * i);
    outs.push_back(encoder->forward(chunk, cache));
  }
  return quant_conv->forward(torch::cat(outs, 2));
}

torch::Tensor WanVAEImpl::decode_frames(const torch::Tensor& z) {
  WanFeatureCache cache;
  const auto x = post_quant_conv->forward(z);
  std::vector<torch::Tensor> outs;
  for (int64_t i = 0; i < x.size(2); ++i) {
    cache.start_chunk();
    outs.push_back(decoder->forward(x.slice(2, i, i + 1), cache, /*first_chunk=*/i == 0));
  }
  return torch::cat(outs, 2);
}

LatentDistribution WanVAEImpl::encode(const torch::Tensor& video) {
  check_video(video);
  return distribution(encode_chunks(wan_patchify(video, config_.patch_size)));
}

torch::Tensor WanVAEImpl::decode(const torch::Tensor& latents) {
  check_latents(latents);
  return torch::clamp(wan_unpatchify(decode_frames(latents), config_.patch_size), -1.0, 1.0);
}

LatentDistribution WanVAEImpl::tiled_encode(const torch::Tensor& video, const WanVAETiling& tiling) {
  check_video(video);
  check_tiling(tiling);
  const auto x = wan_patchify(video, config_.patch_size);
  // As diffusers: the test is on the pixel size, the tiles are cut from the patchified video.
  const bool tiled = video.size(4) > tiling.tile_sample_min_width || video.size(3) > tiling.tile_sample_min_height;
  return distribution(tiled ? encode_tiles(x, tiling) : encode_chunks(x));
}

torch::Tensor WanVAEImpl::tiled_decode(const torch::Tensor& latents, const WanVAETiling& tiling) {
  check_latents(latents);
  check_tiling(tiling);
  const int64_t s = config_.spatial_compression();
  if (latents.size(4) <= tiling.tile_sample_min_width / s && latents.size(3) <= tiling.tile_sample_min_height / s)
    return decode(latents);
  return torch::clamp(wan_unpatchify(decode_tiles(latents, tiling), config_.patch_size), -1.0, 1.0);
}

torch::Tensor WanVAEImpl::encode_tiles(const torch::Tensor& x, const WanVAETiling& t) {
  // diffusers cuts tiles of tile_sample_min pixels from the patchified video (so Wan2.2's tiles
  // cover twice the pixels); its latents are (spatial_compression / patch_size) times smaller.
  const int64_t ratio = config_.spatial_compression() / config_.patch_size;
  const int64_t height = x.size(3), width = x.size(4);
  const int64_t latent_min_h = t.tile_sample_min_height / ratio, latent_min_w = t.tile_sample_min_width / ratio;
  const int64_t latent_stride_h = t.tile_sample_stride_height / ratio;
  const int64_t latent_stride_w = t.tile_sample_stride_width / ratio;
  std::vector<std::vector<torch::Tensor>> rows;
  for (int64_t i = 0; i < height; i += t.tile_sample_stride_height) {
    rows.emplace_back();
    for (int64_t j = 0; j < width; j += t.tile_sample_stride_width) {
      const auto tile = x.slice(3, i, i + t.tile_sample_min_height).slice(4, j, j + t.tile_sample_min_width);
      rows.back().push_back(encode_chunks(tile));
    }
  }
  return blend_tiles(rows, latent_min_h - latent_stride_h, latent_min_w - latent_stride_w, latent_stride_h,
                     latent_stride_w, height / ratio, width / ratio);
}

torch::Tensor WanVAEImpl::decode_tiles(const torch::Tensor& z, const WanVAETiling& t) {
  // Tiles are decoded and blended before unpatchify, in patchified pixels (1 / patch_size).
  const int64_t s = config_.spatial_compression(), p = config_.patch_size;
  const int64_t height = z.size(3), width = z.size(4);
  const int64_t latent_min_h = t.tile_sample_min_height / s, latent_min_w = t.tile_sample_min_width / s;
  const int64_t latent_stride_h = t.tile_sample_stride_height / s, latent_stride_w = t.tile_sample_stride_width / s;
  const int64_t stride_h = t.tile_sample_stride_height / p, stride_w = t.tile_sample_stride_width / p;
  std::vector<std::vector<torch::Tensor>> rows;
  for (int64_t i = 0; i < height; i += latent_stride_h) {
    rows.emplace_back();
    for (int64_t j = 0; j < width; j += latent_stride_w) {
      rows.back().push_back(decode_frames(z.slice(3, i, i + latent_min_h).slice(4, j, j + latent_min_w)));
    }
  }
  return blend_tiles(rows, t.tile_sample_min_height / p - stride_h, t.tile_sample_min_width / p - stride_w, stride_h,
                     stride_w, height * s / p, width * s / p);
}

torch::Tensor WanVAEImpl::latent_stat(const std::vector<double>& values, const torch::Tensor& like) const {
  MM_CHECK(like.dim() >= 2 && like.size(1) == config_.z_dim, "Wan VAE latents: expected [B, z_dim = ", config_.z_dim,
           ", ...], got ", like.sizes());
  std::vector<int64_t> shape(like.dim(), 1);
  shape[1] = config_.z_dim;
  // As the pipelines: torch.tensor(list) is float32, then moved to the latents' dtype.
  return to_device_async(torch::tensor(values, torch::kDouble).to(torch::kFloat).view(shape), like.device())
      .to(like.scalar_type());
}

torch::Tensor WanVAEImpl::encode_normalized(const torch::Tensor& video) {
  const auto weight = quant_conv->parameters().front();  // a copy: parameters() is a temporary
  const auto mean = encode(video.to(weight.device(), weight.scalar_type())).mean;
  return normalize_latents(mean.to(at_least_fp32(mean.scalar_type())));
}

torch::Tensor WanVAEImpl::normalize_latents(const torch::Tensor& mean) const {
  return (mean - latent_stat(config_.latents_mean, mean)) * latent_stat(config_.latents_std, mean).reciprocal();
}

torch::Tensor WanVAEImpl::denormalize_latents(const torch::Tensor& z) const {
  return z / latent_stat(config_.latents_std, z).reciprocal() + latent_stat(config_.latents_mean, z);
}

}  // namespace mm
