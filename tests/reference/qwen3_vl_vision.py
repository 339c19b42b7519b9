"""Oracle: the transformers Qwen3-VL vision tower (Qwen3VLVisionModel, SDPA attention: the
library's default) on tiny random weights.

For each config <name> in <out>/<name>/: config.json (a whole Qwen3VLConfig, as save_pretrained
writes it), model.safetensors (the tower's weights with the "model.visual." prefix, as a full
checkpoint names them), and cases.safetensors with, per case i: case<i>.pixel_values,
case<i>.grid_thw, case<i>.interp_indices and case<i>.interp_weights (the reference's
position-table taps), case<i>.out (the merged tokens, pooler_output, fp32) and
case<i>.deepstack<k> (the DeepStack features in the order the reference returns them).
Config "a" also has case<i>.out_bf16 / case<i>.deepstack<k>_bf16 from the same weights loaded in
bfloat16, and for case 0 the fp32 gradients of every parameter and of the pixels under the loss
sum(out * case0.out_probe) + sum_k sum(deepstack<k> * case0.deepstack<k>_probe):
case0.grad.<parameter name> and case0.grad_pixel_values.
"""
import os, sys

import torch
from safetensors.torch import save_file
from transformers import Qwen3VLConfig
from transformers.utils.logging import disable_progress_bar
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel
from transformers.vision_utils import get_vision_interpolation_indices_and_weights
from vision_weights import randomize  # tests/reference/vision_weights.py

torch.set_num_threads(1)
disable_progress_bar()
out_dir = sys.argv[1]

TEXT = dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=24,
            intermediate_size=64, vocab_size=128, pad_token_id=2,
            rope_parameters={"rope_type": "default", "mrope_section": [4, 4, 4], "mrope_interleaved": True,
                             "rope_theta": 10000.0})

CONFIGS = {
    # A 6 x 6 position table: grids smaller, equal and larger than it, non-square, video, several
    # items per call; DeepStack after blocks 0 and 2.
    "a": dict(vision=dict(depth=4, hidden_size=64, num_heads=4, intermediate_size=96, out_hidden_size=48,
                          patch_size=16, spatial_merge_size=2, temporal_patch_size=2, in_channels=3,
                          num_position_embeddings=36, deepstack_visual_indexes=[0, 2],
                          hidden_act="gelu_pytorch_tanh"),
              cases=[[(1, 4, 4)], [(1, 6, 6)], [(1, 8, 12)], [(3, 4, 6)],
                     [(1, 6, 10), (2, 10, 4), (1, 2, 2)]],
              bf16=True),
    # 3x3 merge, one frame per temporal patch, 2 channels, a table of 50 rows (a 7 x 7 grid and an
    # unused tail, as int(50 ** 0.5) makes it), DeepStack indexes out of order, silu, another
    # rotary base.
    "b": dict(vision=dict(depth=3, hidden_size=48, num_heads=2, intermediate_size=80, out_hidden_size=40,
                          patch_size=6, spatial_merge_size=3, temporal_patch_size=1, in_channels=2,
                          num_position_embeddings=50, deepstack_visual_indexes=[2, 0], hidden_act="silu",
                          rope_parameters={"rope_type": "axial", "rope_theta": 500.0}),
              cases=[[(1, 9, 15), (2, 12, 6), (1, 3, 3)], [(1, 21, 9)]],
              bf16=False),
    # No merge (every patch a token), rows and columns of one patch, no DeepStack.
    "c": dict(vision=dict(depth=2, hidden_size=32, num_heads=2, intermediate_size=40, out_hidden_size=24,
                          patch_size=4, spatial_merge_size=1, temporal_patch_size=2, in_channels=3,
                          num_position_embeddings=16, deepstack_visual_indexes=[], hidden_act="gelu"),
              cases=[[(1, 1, 5), (2, 1, 1), (1, 7, 3)]],
              bf16=False),
}


def run_config(name, spec):
    torch.manual_seed(4321 + ord(name))
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    cfg = Qwen3VLConfig(vision_config=spec["vision"], text_config=TEXT)
    cfg.save_pretrained(d)
    vc = cfg.vision_config
    model = Qwen3VLVisionModel._from_config(vc, attn_implementation="sdpa").eval()
    assert model.config._attn_implementation == "sdpa"
    assert model.num_grid_per_side == int(vc.num_position_embeddings ** 0.5)
    randomize(model)
    with torch.no_grad():  # the learned table at unit scale, so that a wrong tap shows
        model.pos_embed.weight.copy_(torch.randn_like(model.pos_embed.weight))
    save_file({"model.visual." + k: v.contiguous() for k, v in model.state_dict().items()},
              os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    model_bf16 = None
    if spec["bf16"]:
        # Built in bf16 as from_pretrained(dtype=torch.bfloat16) builds it: parameters in bf16,
        # the rotary inv_freq buffer kept in fp32.
        model_bf16 = Qwen3VLVisionModel._from_config(vc, attn_implementation="sdpa", dtype=torch.bfloat16).eval()
        model_bf16.load_state_dict(model.state_dict())
        assert model_bf16.rotary_pos_emb.inv_freq.dtype == torch.float32
        assert model_bf16.blocks[0].attn.qkv.weight.dtype == torch.bfloat16
    patch_dim = vc.in_channels * vc.temporal_patch_size * vc.patch_size ** 2
    cases = {}
    for i, items in enumerate(spec["cases"]):
        grid = torch.tensor(items, dtype=torch.int64)
        n = int(grid.prod(-1).sum())
        pixels = torch.randn(n, patch_dim)
        p = f"case{i}."
        with torch.no_grad():
            res = model(pixels, grid_thw=grid)
        assert res.pooler_output.shape == (n // vc.spatial_merge_size ** 2, vc.out_hidden_size)
        assert len(res.deepstack_features) == len(vc.deepstack_visual_indexes)
        cases[p + "out"] = res.pooler_output.contiguous()
        for k, f in enumerate(res.deepstack_features):
            cases[p + f"deepstack{k}"] = f.contiguous()
        if model_bf16 is not None:
            with torch.no_grad():
                res16 = model_bf16(pixels, grid_thw=grid)
            cases[p + "out_bf16"] = res16.pooler_output.contiguous()
            for k, f in enumerate(res16.deepstack_features):
                cases[p + f"deepstack{k}_bf16"] = f.contiguous()
        indices, weights = get_vision_interpolation_indices_and_weights(
            grid, num_grid_per_side=model.num_grid_per_side, mode=model.interpolation_mode,
            align_corners=model.interpolation_align_corners, spatial_merge_size=vc.spatial_merge_size)
        cases[p + "interp_indices"] = indices.to(torch.int64).contiguous()
        cases[p + "interp_weights"] = weights.contiguous()
        cases[p + "pixel_values"] = pixels
        cases[p + "grid_thw"] = grid
        if spec["bf16"] and i == 0:
            px = pixels.clone().requires_grad_(True)
            res = model(px, grid_thw=grid)
            probe = torch.randn_like(res.pooler_output)
            loss = (res.pooler_output * probe).sum()
            cases[p + "out_probe"] = probe
            for k, f in enumerate(res.deepstack_features):
                probe_k = torch.randn_like(f)
                cases[p + f"deepstack{k}_probe"] = probe_k
                loss = loss + (f * probe_k).sum()
            loss.backward()
            for pname, param in model.named_parameters():
                cases[p + "grad." + pname] = param.grad.contiguous()
            cases[p + "grad_pixel_values"] = px.grad.contiguous()
    save_file(cases, os.path.join(d, "cases.safetensors"))


for name, spec in CONFIGS.items():
    run_config(name, spec)
print("wrote", out_dir)
