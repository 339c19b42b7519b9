"""Oracle: transformers 5.17's Qwen3_5GatedDeltaNet (the linear-attention layer of Qwen3.5) on tiny
random configs, fp32, through its torch paths (no FLA / causal-conv1d kernels installed).

For each config NAME it writes OUT/NAME.json (the layer's config keys, HF names) and
OUT/NAME.safetensors with
  weight.P       every parameter P of the layer (HF names: in_proj_qkv.weight, conv1d.weight, ...)
  plain.x, plain.r, plain.out, plain.grad_x, plain.grad.P
                 a [2, 70] batch (70 crosses the 64-token chunk), out = layer(x), and the
                 gradients of sum(out * r)
  plain.out_bf16 the same x through the layer cast to bf16 (transformers' own bf16 rounding)
  mask.x, mask.attention_mask, mask.out
                 a batch whose row 1 is left-padded by 5
  decode.x, decode.out
                 [2, 66] through a DynamicCache: a 37-token prefill, 6 single-token steps (the
                 recurrent form with the conv state), then a 23-token chunk from the cached state
  alone.x, alone.r, alone.cu_seqlens, alone.out, alone.grad_x, alone.grad.P
                 samples of 5, 64, 1, 70 and 19 tokens, each run alone (batch 1) and concatenated
                 along the sequence; grads of the sum over samples of sum(out * r). What a packed
                 row of these samples must give.
"""
import copy
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import DynamicCache, Qwen3_5TextConfig
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5GatedDeltaNet

OUT = sys.argv[1]
CONFIGS = {
    # As many value heads as key heads, Qwen3.5's conv kernel of 4.
    "equal_heads": dict(hidden_size=32, linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=8,
                        linear_value_head_dim=8, linear_conv_kernel_dim=4),
    # Key heads repeated for twice as many value heads (as the published 2:1 to 4:1 layouts),
    # key and value head sizes apart, a conv kernel of 3, a wider norm epsilon.
    "grouped": dict(hidden_size=24, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=6,
                    linear_value_head_dim=5, linear_conv_kernel_dim=3, rms_norm_eps=1e-5),
}
ALONE_LENGTHS = [5, 64, 1, 70, 19]


def make_layer(keys, gen):
    config = Qwen3_5TextConfig(vocab_size=50, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
                               num_attention_heads=2, num_key_value_heads=1, head_dim=8, intermediate_size=40,
                               **keys)
    layer = Qwen3_5GatedDeltaNet(config, layer_idx=0).float()
    with torch.no_grad():
        # Away from the init values (ones, a uniform log) so that every parameter matters.
        layer.dt_bias.copy_(torch.randn(layer.dt_bias.shape, generator=gen) * 0.5)
        layer.A_log.copy_(torch.rand(layer.A_log.shape, generator=gen) * 2.0 - 1.0)
        layer.norm.weight.copy_(1.0 + 0.2 * torch.randn(layer.norm.weight.shape, generator=gen))
        layer.conv1d.weight.copy_(torch.randn(layer.conv1d.weight.shape, generator=gen) * 0.5)
        for proj in (layer.in_proj_qkv, layer.in_proj_z, layer.in_proj_b, layer.in_proj_a, layer.out_proj):
            proj.weight.copy_(torch.randn(proj.weight.shape, generator=gen) * 0.3)
    return config, layer


def grads(layer, x, prefix, out):
    for name, p in layer.named_parameters():
        out[f"{prefix}.grad.{name}"] = p.grad.detach().clone()
        p.grad = None
    out[f"{prefix}.grad_x"] = x.grad.detach().clone()


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, keys in CONFIGS.items():
        gen = torch.Generator().manual_seed(len(name))
        config, layer = make_layer(keys, gen)
        hidden = config.hidden_size
        out = {f"weight.{n}": p.detach().clone() for n, p in layer.named_parameters()}

        x = torch.randn(2, 70, hidden, generator=gen).requires_grad_()
        r = torch.randn(2, 70, hidden, generator=gen)
        y = layer(x)
        (y * r).sum().backward()
        out.update({"plain.x": x.detach(), "plain.r": r, "plain.out": y.detach()})
        grads(layer, x, "plain", out)
        with torch.no_grad():
            out["plain.out_bf16"] = copy.deepcopy(layer).bfloat16()(x.detach().bfloat16()).float()

        with torch.no_grad():
            x = torch.randn(2, 20, hidden, generator=gen)
            mask = torch.ones(2, 20, dtype=torch.long)
            mask[1, :5] = 0
            out.update({"mask.x": x, "mask.attention_mask": mask, "mask.out": layer(x, attention_mask=mask)})

            x = torch.randn(2, 66, hidden, generator=gen)
            cache = DynamicCache(config=config)
            pieces = [layer(x[:, :37], cache_params=cache)]
            for t in range(37, 43):
                pieces.append(layer(x[:, t:t + 1], cache_params=cache))
            pieces.append(layer(x[:, 43:], cache_params=cache))
            out.update({"decode.x": x, "decode.out": torch.cat(pieces, 1)})

        xs = [torch.randn(1, n, hidden, generator=gen).requires_grad_() for n in ALONE_LENGTHS]
        rs = [torch.randn(1, n, hidden, generator=gen) for n in ALONE_LENGTHS]
        ys = [layer(xi) for xi in xs]
        sum((yi * ri).sum() for yi, ri in zip(ys, rs)).backward()
        for n, p in layer.named_parameters():
            out[f"alone.grad.{n}"] = p.grad.detach().clone()
        out["alone.grad_x"] = torch.cat([xi.grad for xi in xs], 1)
        out["alone.x"] = torch.cat([xi.detach() for xi in xs], 1)
        out["alone.r"] = torch.cat(rs, 1)
        out["alone.out"] = torch.cat([yi.detach() for yi in ys], 1)
        out["alone.cu_seqlens"] = torch.tensor([0] + torch.tensor(ALONE_LENGTHS).cumsum(0).tolist())

        save_file({k: v.contiguous() for k, v in out.items()}, os.path.join(OUT, f"{name}.safetensors"))
        with open(os.path.join(OUT, f"{name}.json"), "w") as f:
            json.dump({**keys, "rms_norm_eps": config.rms_norm_eps, "hidden_act": config.hidden_act}, f, indent=1)


if __name__ == "__main__":
    main()
