"""Oracle: diffusers' AutoencoderKLWan (the Wan2.1 / Wan2.2 VAE) on tiny random weights, fp32.

Writes <out>/<name>/ for each config:
  model/    config.json + diffusion_pytorch_model.safetensors (save_pretrained)
  sharded/  the same weights in several shards with diffusion_pytorch_model.safetensors.index.json
  cases.safetensors:
    enc_video.x [B, 3, 9, H, W] (3 chunks), enc_video.mean / .logvar (latent_dist)
    enc_image.x [1, 3, 1, H, W], enc_image.mean / .logvar
    dec_video.z [B, z, 3, h, w] -> dec_video.out (9 frames); dec_image.z [1, z, 1, h, w] -> dec_image.out
    tiling [4] int64 (tile_sample_min_height, _min_width, _stride_height, _stride_width)
    tiled_enc.x -> tiled_enc.mean / .logvar and tiled_dec.z -> tiled_dec.out: encode / decode
      after enable_tiling(*tiling), inputs large enough for several blended tiles
    sample.seed [1] int64, sample.out: enc_video's latent_dist.sample(torch.Generator().manual_seed(seed))
    norm.out: (enc_video.mean - latents_mean) * (1 / latents_std) as WanImageToVideoPipeline
    denorm.out: dec_video.z / (1 / latents_std) + latents_mean as WanPipeline before decode
Config "a" is Wan2.1-like (z_dim 16 -> 4, 8x / 4x compression), "b" Wan2.2-like (is_residual,
patch_size 2, in/out channels 12, decoder_base_dim != base_dim, 16x / 4x compression).
"""
import os, sys

import torch
from safetensors.torch import save_file
from diffusers import AutoencoderKLWan
from diffusers.utils import logging as diffusers_logging

torch.set_num_threads(1)
diffusers_logging.set_verbosity_error()
out_dir = sys.argv[1]

CONFIGS = {
    "a": dict(
        config=dict(base_dim=8, z_dim=4, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
                    temperal_downsample=[False, True, True],
                    scale_factor_spatial=8, scale_factor_temporal=4),
        batch=2, hw=(16, 24), tiled_hw=(40, 48), tiling=(32, 32, 16, 16)),
    "b": dict(
        config=dict(base_dim=8, decoder_base_dim=12, z_dim=6, dim_mult=[1, 2, 4, 4], num_res_blocks=1,
                    temperal_downsample=[False, True, True], is_residual=True, in_channels=12,
                    out_channels=12, patch_size=2, scale_factor_spatial=16, scale_factor_temporal=4),
        batch=1, hw=(32, 48), tiled_hw=(48, 64), tiling=(32, 32, 16, 16)),
}


def moments(dist):
    return dist.mean.contiguous(), dist.logvar.contiguous()


for name, spec in CONFIGS.items():
    torch.manual_seed(len(name) * 11 + ord(name))
    z_dim = spec["config"]["z_dim"]
    config = dict(spec["config"],
                  latents_mean=[round(float(v), 4) for v in torch.randn(z_dim)],
                  latents_std=[round(float(v), 4) for v in 0.5 + torch.rand(z_dim) * 2])
    vae = AutoencoderKLWan(**config).eval()
    with torch.no_grad():  # unit-scale activations, so that a wrong op shows as a large difference
        for pname, p in vae.named_parameters():
            if pname.endswith("gamma"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif pname.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / (p[0].numel() ** 0.5))
        # a small output layer keeps the decoded video mostly inside the [-1, 1] clamp
        vae.decoder.conv_out.weight.mul_(0.3)
    target = os.path.join(out_dir, name)
    vae.save_pretrained(os.path.join(target, "model"))
    vae.save_pretrained(os.path.join(target, "sharded"), max_shard_size="1MB")

    s, t, p = config["scale_factor_spatial"], 4, config.get("patch_size") or 1
    B, (H, W) = spec["batch"], spec["hw"]
    tensors = {}
    with torch.no_grad():
        x = torch.rand(B, 3, 9, H, W) * 2 - 1
        mean, logvar = moments(vae.encode(x).latent_dist)
        tensors.update({"enc_video.x": x, "enc_video.mean": mean, "enc_video.logvar": logvar})
        seed = 1234
        tensors["sample.seed"] = torch.tensor([seed])
        tensors["sample.out"] = vae.encode(x).latent_dist.sample(torch.Generator().manual_seed(seed)).contiguous()
        latents_mean = torch.tensor(vae.config.latents_mean).view(1, z_dim, 1, 1, 1).to(mean.device, mean.dtype)
        latents_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, z_dim, 1, 1, 1).to(mean.device, mean.dtype)
        tensors["norm.out"] = (mean - latents_mean) * latents_std

        x = torch.rand(1, 3, 1, H, W) * 2 - 1
        mean, logvar = moments(vae.encode(x).latent_dist)
        tensors.update({"enc_image.x": x, "enc_image.mean": mean, "enc_image.logvar": logvar})

        z = torch.randn(B, z_dim, 3, H // s, W // s)
        tensors.update({"dec_video.z": z, "dec_video.out": vae.decode(z).sample.contiguous()})
        tensors["denorm.out"] = z / latents_std + latents_mean
        z = torch.randn(1, z_dim, 1, H // s, W // s)
        tensors.update({"dec_image.z": z, "dec_image.out": vae.decode(z).sample.contiguous()})

        tensors["tiling"] = torch.tensor(spec["tiling"])
        vae.enable_tiling(*spec["tiling"])
        TH, TW = spec["tiled_hw"]
        x = torch.rand(1, 3, 5, TH, TW) * 2 - 1
        mean, logvar = moments(vae.encode(x).latent_dist)
        tensors.update({"tiled_enc.x": x, "tiled_enc.mean": mean, "tiled_enc.logvar": logvar})
        z = torch.randn(1, z_dim, 2, TH // s, TW // s)
        tensors.update({"tiled_dec.z": z, "tiled_dec.out": vae.decode(z).sample.contiguous()})
        vae.disable_tiling()
        # the tiles must differ from the whole-frame result, or the tiling test would prove nothing
        tensors["untiled_dec.out"] = vae.decode(z).sample.contiguous()

    print(f"{name} tiled vs whole-frame decode: max diff "
          f"{(tensors['tiled_dec.out'] - tensors['untiled_dec.out']).abs().max().item():.3g}")
    for k in ("dec_video.out", "tiled_dec.out"):
        clamped = (tensors[k].abs() >= 1).float().mean().item()
        print(f"{name} {k}: std {tensors[k].std().item():.3f}, {100 * clamped:.1f}% clamped")
    save_file(tensors, os.path.join(target, "cases.safetensors"))
print("ok")
