"""Reference side of the Wan benchmarks (bench/bench_wan.cpp is the mmtrain side, same arguments,
same shapes, same weights): diffusers' WanTransformer3DModel and AutoencoderKLWan, fp32.
Usage (each measurement prints one JSON line; run each in a fresh process so that its peak RSS
is its own):
  bench_wan.py make OUT_DIR                                  -> OUT_DIR/{transformer,vae} (save_pretrained)
  bench_wan.py train TRANSFORMER_DIR THREADS STEPS BATCH     flow-matching training step
  bench_wan.py decode VAE_DIR THREADS REPEATS LATENT_FRAMES H W
  bench_wan.py tiled_decode VAE_DIR THREADS REPEATS LATENT_FRAMES H W   (tiles 128, stride 96)
H and W are decoded pixels. Timings: one warm-up, then the median; REPEATS 0: one cold decode."""
import json, resource, sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from diffusers import AutoencoderKLWan, WanTransformer3DModel
from diffusers.utils import logging as diffusers_logging

from bench_timing import median_ms

diffusers_logging.set_verbosity_error()
TEXT_TOKENS = 64
LATENT = (16, 5, 16, 16)  # channels, latent frames, latent height, latent width of one sample
TILING = (128, 128, 96, 96)


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def make(out_dir):
    torch.manual_seed(0)
    # 6 layers of width 384 (6 heads x 64), the real text width (4096) and latent channels (16).
    WanTransformer3DModel(num_attention_heads=6, attention_head_dim=64, in_channels=16, out_channels=16,
                          text_dim=4096, freq_dim=256, ffn_dim=1536, num_layers=6, patch_size=(1, 2, 2),
                          cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6,
                          rope_max_seq_len=1024).save_pretrained(f"{out_dir}/transformer")
    # The Wan2.1 layout (z_dim 16, 8x spatial / 4x temporal) at a third of its width.
    AutoencoderKLWan(base_dim=32, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
                     temperal_downsample=[False, True, True]).save_pretrained(f"{out_dir}/vae")


def is_no_decay(name):
    # mm::is_no_decay_parameter (the HF Trainer's rule), so both sides decay the same tensors.
    lower = name.lower()
    return ("bias" in lower or "layernorm" in lower or "rmsnorm" in lower
            or any(part == "norm" or part.endswith("_norm") for part in lower.split(".")))


def train(model_dir, steps, batch):
    rss_before_model = peak_rss_mb()
    # from_pretrained refuses this model without accelerate (absent here): build it from its
    # config and load the saved fp32 weights strictly, which is what it would do.
    model = WanTransformer3DModel.from_config(WanTransformer3DModel.load_config(model_dir))
    model.load_state_dict(load_file(f"{model_dir}/diffusion_pytorch_model.safetensors"))
    model.train()
    named = list(model.named_parameters())
    optimizer = torch.optim.AdamW([{"params": [p for n, p in named if not is_no_decay(n)], "weight_decay": 0.01},
                                   {"params": [p for n, p in named if is_no_decay(n)], "weight_decay": 0.0}],
                                  lr=1e-4, fused=True)
    # FlowMatchEulerDiscreteScheduler's training table with Wan's shift 5: sigma(i / N) for i = N .. 1.
    shift, n = 5.0, 1000
    s = torch.linspace(1.0, 1.0 / n, n)
    table = shift * s / (1 + (shift - 1) * s)
    torch.manual_seed(0)
    x0 = torch.randn(batch, *LATENT)
    text = torch.randn(batch, TEXT_TOKENS, model.config.text_dim)

    def step():
        sigma = table[(torch.rand(batch) * n).long()]
        noise = torch.randn_like(x0)
        sigma5 = sigma.view(batch, 1, 1, 1, 1)
        noisy = (1 - sigma5) * x0 + sigma5 * noise
        pred = model(hidden_states=noisy, timestep=sigma * n, encoder_hidden_states=text, return_dict=False)[0]
        loss = F.mse_loss(pred.float(), (noise - x0).float())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    ms = median_ms(step, steps)
    pt, ph, pw = model.config.patch_size
    tokens = batch * (LATENT[1] // pt) * (LATENT[2] // ph) * (LATENT[3] // pw)
    return {"impl": "diffusers", "mode": "train", "batch": batch, "latent_tokens_per_step": tokens,
            "ms_per_step": ms, "steps_per_s": 1e3 / ms, "latent_tokens_per_s": tokens * 1e3 / ms,
            "peak_rss_mb": peak_rss_mb(), "training_rss_mb": peak_rss_mb() - rss_before_model}


def decode(vae_dir, mode, repeats, latent_frames, height, width):
    vae = AutoencoderKLWan.from_pretrained(vae_dir).eval()
    if mode == "tiled_decode":
        vae.enable_tiling(*TILING)
    s, t = vae.config.scale_factor_spatial, vae.config.scale_factor_temporal
    torch.manual_seed(0)
    z = torch.randn(1, vae.config.z_dim, latent_frames, height // s, width // s)
    rss_before = peak_rss_mb()
    with torch.no_grad():
        ms = median_ms(lambda: vae.decode(z).sample, repeats)
    frames = 1 + (latent_frames - 1) * t
    return {"impl": "diffusers", "mode": mode, "frames": frames, "height": height, "width": width,
            "ms_per_decode": ms, "frames_per_s": frames * 1e3 / ms, "peak_rss_mb": peak_rss_mb(),
            "decode_rss_mb": peak_rss_mb() - rss_before}


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "make":
        make(sys.argv[2])
        sys.exit(0)
    torch.set_num_threads(int(sys.argv[3]))
    if mode == "train":
        result = train(sys.argv[2], int(sys.argv[4]), int(sys.argv[5]))
    else:
        result = decode(sys.argv[2], mode, int(sys.argv[4]), *map(int, sys.argv[5:8]))
    print(json.dumps(result))
