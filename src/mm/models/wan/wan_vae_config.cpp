#include "mm/models/wan/wan_vae_config.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "mm/core/error.h"
#include "mm/core/json_config.h"
#include "mm/core/memory_bounds.h"

namespace mm {

WanVAEConfig::WanVAEConfig()
    : latents_mean{-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
                   0.4134,  -0.0715, 0.5517,  -0.3632, -0.1922, -0.9497, 0.2503, -0.2921},
      latents_std{2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
                  3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160} {}

void WanVAEConfig::validate() const {
  MM_CHECK(base_dim > 0, "Wan VAE config: base_dim=", base_dim, " must be positive");
  MM_CHECK(decoder_base_dim > 0, "Wan VAE config: decoder_base_dim=", decoder_base_dim, " must be positive");
  MM_CHECK(z_dim > 0, "Wan VAE config: z_dim=", z_dim, " must be positive");
  MM_CHECK(!dim_mult.empty(), "Wan VAE config: dim_mult must not be empty");
  for (const auto m : dim_mult) MM_CHECK(m > 0, "Wan VAE config: dim_mult has a non-positive entry ", m);
  // Without a residual block a level would keep its input width while its resample expects the output width.
  MM_CHECK(num_res_blocks >= 1, "Wan VAE config: num_res_blocks=", num_res_blocks, " must be at least 1");
  const int64_t levels = static_cast<int64_t>(dim_mult.size());
  MM_CHECK(static_cast<int64_t>(temperal_downsample.size()) == levels - 1, "Wan VAE config: temperal_downsample has ",
           temperal_downsample.size(), " entries, expected len(dim_mult) - 1 = ", levels - 1);
  MM_CHECK(dropout >= 0.0 && dropout < 1.0, "Wan VAE config: dropout=", dropout, " must be in [0, 1)");
  MM_CHECK(static_cast<int64_t>(latents_mean.size()) == z_dim, "Wan VAE config: latents_mean has ",
           latents_mean.size(), " entries, expected z_dim = ", z_dim);
  MM_CHECK(static_cast<int64_t>(latents_std.size()) == z_dim, "Wan VAE config: latents_std has ", latents_std.size(),
           " entries, expected z_dim = ", z_dim);
  for (const auto s : latents_std) MM_CHECK(s > 0.0, "Wan VAE config: latents_std has a non-positive entry ", s);
  MM_CHECK(patch_size >= 1, "Wan VAE config: patch_size=", patch_size, " must be at least 1 (or null)");
  MM_CHECK(in_channels > 0 && in_channels % (patch_size * patch_size) == 0, "Wan VAE config: in_channels=",
           in_channels, " must be a positive multiple of patch_size^2 = ", patch_size * patch_size);
  MM_CHECK(out_channels > 0 && out_channels % (patch_size * patch_size) == 0, "Wan VAE config: out_channels=",
           out_channels, " must be a positive multiple of patch_size^2 = ", patch_size * patch_size);
  if (is_residual) {
    // diffusers' AvgDown3D / DupUp3D fold space-time into channels: the widths must divide evenly.
    for (int64_t i = 0; i < levels; ++i) {
      const int64_t in = base_dim * (i == 0 ? 1 : dim_mult[i - 1]), out = base_dim * dim_mult[i];
      const bool down = i != levels - 1;
      const int64_t factor = down ? (temperal_downsample[i] ? 2 : 1) * 4 : 1;
      MM_CHECK(in * factor % out == 0, "Wan VAE config: base_dim * dim_mult: encoder level ", i, " maps ", in,
               " to ", out, " channels, but in * ", factor, " is not divisible by out (is_residual)");
    }
    std::vector<int64_t> dims = {decoder_base_dim * dim_mult.back()};
    for (auto it = dim_mult.rbegin(); it != dim_mult.rend(); ++it) dims.push_back(decoder_base_dim * *it);
    for (int64_t i = 0; i + 1 < levels; ++i) {
      const int64_t factor = (temperal_downsample[levels - 2 - i] ? 2 : 1) * 4;
      MM_CHECK(dims[i + 1] * factor % dims[i] == 0, "Wan VAE config: decoder_base_dim * dim_mult: decoder level ", i,
               " maps ", dims[i], " to ", dims[i + 1], " channels, but out * ", factor,
               " is not divisible by in (is_residual)");
    }
  }
  int64_t spatial = patch_size, temporal = 1;
  for (int64_t i = 0; i + 1 < levels; ++i) {
    spatial *= 2;
    if (temperal_downsample[i]) temporal *= 2;
  }
  MM_CHECK(scale_factor_spatial == spatial, "Wan VAE config: scale_factor_spatial=", scale_factor_spatial,
           " disagrees with the architecture (2^(len(dim_mult) - 1) * patch_size = ", spatial, ")");
  MM_CHECK(scale_factor_temporal == temporal, "Wan VAE config: scale_factor_temporal=", scale_factor_temporal,
           " disagrees with the architecture (2^(true entries of temperal_downsample) = ", temporal, ")");
  double widest = 0;
  for (const auto m : dim_mult) widest = std::max(widest, static_cast<double>(std::max(base_dim, decoder_base_dim) * m));
  const double levels_blocks = static_cast<double>(dim_mult.size()) * static_cast<double>(num_res_blocks + 1);
  check_model_fits_in_memory("Wan VAE config",
                             {{str_cat("base_dim (", base_dim, ") x dim_mult x num_res_blocks (", num_res_blocks,
                                       "): 3D convolutions of up to ", static_cast<int64_t>(widest), " channels"),
                               2 * levels_blocks * 2 * 27 * widest * widest}});
}

WanVAEConfig WanVAEConfig::from_json(const nlohmann::json& json, const std::string& source) {
  const JsonView root(json, source);
  const auto type = root.get_or<std::string>("_class_name", "AutoencoderKLWan");
  MM_CHECK(type == "AutoencoderKLWan", root.where("_class_name"), ": '", type,
           "' is not a Wan VAE (supported: AutoencoderKLWan)");
  // diffusers' WanEncoder3d would call an attention block in down_blocks with the feature cache,
  // which it does not accept: a config with attention there cannot encode in diffusers either.
  MM_CHECK(!root.has("attn_scales") || root.raw()["attn_scales"].empty(), root.where("attn_scales"),
           ": must be empty (diffusers' Wan encoder cannot run attention blocks in down_blocks)");
  WanVAEConfig c;
  c.base_dim = root.get_or("base_dim", c.base_dim);
  c.decoder_base_dim = root.get_or("decoder_base_dim", c.base_dim);
  c.z_dim = root.get_or("z_dim", c.z_dim);
  c.dim_mult = root.get_or("dim_mult", c.dim_mult);
  c.num_res_blocks = root.get_or("num_res_blocks", c.num_res_blocks);
  c.temperal_downsample = root.get_or("temperal_downsample", c.temperal_downsample);
  c.dropout = root.get_or("dropout", c.dropout);
  c.latents_mean = root.get_or("latents_mean", c.latents_mean);
  c.latents_std = root.get_or("latents_std", c.latents_std);
  c.is_residual = root.get_or("is_residual", c.is_residual);
  c.in_channels = root.get_or("in_channels", c.in_channels);
  c.out_channels = root.get_or("out_channels", c.out_channels);
  c.patch_size = root.get_or("patch_size", c.patch_size);
  c.scale_factor_temporal = root.get_or("scale_factor_temporal", c.scale_factor_temporal);
  c.scale_factor_spatial = root.get_or("scale_factor_spatial", c.scale_factor_spatial);
  try {
    c.validate();
  } catch (const Error& e) {
    fail(source, ": ", e.what());
  }
  return c;
}

WanVAEConfig WanVAEConfig::from_file(const std::filesystem::path& config_json) {
  return from_json(read_json_file(config_json), config_json.string());
}

}  // namespace mm
