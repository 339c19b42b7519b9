"""Oracle: diffusers' WanTransformer3DModel (the Wan2.1/2.2 DiT) on tiny random weights, fp32.

Writes <out>/<name>/model/ (config.json + diffusion_pytorch_model*.safetensors, save_pretrained;
config "i2v" is saved sharded, with diffusion_pytorch_model.safetensors.index.json) and
<out>/<name>/cases.safetensors with:
  latents [B, in_channels, F, H, W], timestep [B] or [B, tokens] (per-token, Wan2.2 TI2V),
  text [B, L, text_dim], image (only configs with image_dim: [B, Limg, image_dim], or
  [2B, Limg, image_dim] first/last frame pairs with pos_embed_seq_len), out (the transformer's
  sample), out_bf16 (config "i2v" only: loaded and run in bf16 by diffusers), loss_weight (the loss is (out * loss_weight).sum()), grad.latents and grad.<param> for
  the parameters listed in grad_names (a newline-joined uint8 string).
Configs: "t2v" (odd frame count, batch 2 with different timesteps), "i2v" (Wan2.1 I2V: image
embedder + added k/v, 512 text tokens as diffusers splits the context there), "flf2v" (pos_embed
over first + last frame), "ti2v" (per-token timesteps, cross_attn_norm off, patch 2x2x2 in time).
"""
import copy, os, sys

import torch
from safetensors.torch import save_file
from diffusers import WanTransformer3DModel

torch.set_num_threads(1)
out_dir = sys.argv[1]

BASE = dict(num_attention_heads=2, attention_head_dim=12, in_channels=4, out_channels=4, text_dim=16,
            freq_dim=20, ffn_dim=40, num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
            eps=1e-6, rope_max_seq_len=32, patch_size=(1, 2, 2))

CONFIGS = {
    "t2v": dict(config=dict(BASE), latents=(2, 4, 3, 4, 6), text_len=7, image=None, per_token=False),
    "i2v": dict(config=dict(BASE, in_channels=6, image_dim=10, added_kv_proj_dim=24, freq_dim=19),
                latents=(2, 6, 3, 4, 4), text_len=512, image=(2, 5), per_token=False),
    "flf2v": dict(config=dict(BASE, in_channels=6, image_dim=10, added_kv_proj_dim=24, pos_embed_seq_len=10),
                  latents=(1, 6, 1, 4, 6), text_len=512, image=(2, 5), per_token=False),
    "ti2v": dict(config=dict(BASE, cross_attn_norm=False, out_channels=3, patch_size=(2, 2, 2),
                             num_attention_heads=3, attention_head_dim=8),
                 latents=(2, 4, 4, 4, 4), text_len=6, image=None, per_token=True),
}

GRAD_PARAMS = ["patch_embedding.weight", "blocks.0.attn1.to_q.weight", "blocks.0.attn1.norm_k.weight",
               "blocks.1.attn2.to_v.weight", "blocks.1.scale_shift_table", "scale_shift_table",
               "blocks.0.ffn.net.0.proj.weight", "condition_embedder.time_embedder.linear_1.weight",
               "condition_embedder.time_proj.weight", "condition_embedder.text_embedder.linear_1.weight",
               "proj_out.weight"]
IMAGE_GRAD_PARAMS = ["blocks.0.attn2.add_k_proj.weight", "blocks.1.attn2.norm_added_k.weight",
                     "condition_embedder.image_embedder.ff.net.0.proj.weight",
                     "condition_embedder.image_embedder.norm1.weight"]


def perturb(model):
    """Unit-scale activations and non-trivial norms/tables, so that a wrong formula shows."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "scale_shift_table" in name or "pos_embed" in name:
                p.copy_(0.5 * torch.randn_like(p))
            elif p.ndim == 1 and ("norm" in name) and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif p.ndim == 1:
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / (p[0].numel()) ** 0.5)


for index, (name, spec) in enumerate(CONFIGS.items()):
    torch.manual_seed(1000 + index)
    model = WanTransformer3DModel(**spec["config"]).eval()
    perturb(model)
    target = os.path.join(out_dir, name)
    model.save_pretrained(os.path.join(target, "model"), max_shard_size="40KB" if name == "i2v" else "10GB")

    batch, channels, frames, height, width = spec["latents"]
    pt, ph, pw = model.config.patch_size
    tokens = (frames // pt) * (height // ph) * (width // pw)
    latents = torch.randn(*spec["latents"], requires_grad=True)
    if spec["per_token"]:
        # Wan2.2 TI2V: timestep 0 for the tokens of the (clean) first latent frame, t for the rest.
        per_frame = tokens // (frames // pt)
        timestep = torch.tensor([[0.0] * per_frame + [700.0] * (tokens - per_frame),
                                 [0.0] * per_frame + [31.25] * (tokens - per_frame)])
    else:
        timestep = torch.tensor([999.0, 250.5][:batch])
    text = torch.randn(batch, spec["text_len"], model.config.text_dim)
    image = None
    if spec["image"] is not None:
        rows = batch * (2 if model.config.pos_embed_seq_len else 1)
        image = torch.randn(rows, spec["image"][1], model.config.image_dim)
    out = model(hidden_states=latents, timestep=timestep, encoder_hidden_states=text,
                encoder_hidden_states_image=image, return_dict=False)[0]
    loss_weight = torch.randn_like(out)
    (out * loss_weight).sum().backward()

    grad_names = GRAD_PARAMS + (IMAGE_GRAD_PARAMS if image is not None else [])
    if model.config.pos_embed_seq_len:
        grad_names.append("condition_embedder.image_embedder.pos_embed")
    params = dict(model.named_parameters())
    tensors = {"latents": latents.detach(), "timestep": timestep, "text": text, "out": out.detach().contiguous(),
               "loss_weight": loss_weight, "grad.latents": latents.grad,
               "grad_names": torch.tensor(list("\n".join(grad_names).encode()), dtype=torch.uint8)}
    if image is not None:
        tensors["image"] = image
    if name == "i2v":
        # bf16 as diffusers' from_pretrained(torch_dtype=bf16) loads it (which needs accelerate, absent
        # here): parameters under a module named in _keep_in_fp32_modules stay fp32 (the rule of
        # diffusers.models.model_loading_utils.load_model_dict_into_meta), the rest bf16.
        half = copy.deepcopy(model).eval()
        with torch.no_grad():
            for pname, p in half.named_parameters():
                if not any(m in pname.split(".") for m in WanTransformer3DModel._keep_in_fp32_modules):
                    p.data = p.data.bfloat16()
        with torch.no_grad():
            tensors["out_bf16"] = half(hidden_states=latents.detach().bfloat16(), timestep=timestep,
                                       encoder_hidden_states=text.bfloat16(),
                                       encoder_hidden_states_image=image.bfloat16(), return_dict=False)[0]
    for p in grad_names:
        tensors["grad." + p] = params[p].grad.contiguous()
    save_file(tensors, os.path.join(target, "cases.safetensors"))
print("ok")
