"""Oracle: the transformers Qwen2-VL vision tower (Qwen2VisionTransformerPretrainedModel, SDPA
attention: the library's default) on tiny random weights, fp32.

For each config <name> in <out>/<name>/: config.json (a whole Qwen2VLConfig, as save_pretrained
writes it), model.safetensors (the tower's weights with the "visual." prefix), and
cases.safetensors with, per case i: case<i>.pixel_values, case<i>.grid_thw and case<i>.out (the
merged tokens, pooler_output).
"""
import os, sys

import torch
from safetensors.torch import save_file
from transformers import Qwen2VLConfig
from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VisionTransformerPretrainedModel
from vision_weights import randomize  # tests/reference/vision_weights.py

torch.set_num_threads(1)
out_dir = sys.argv[1]

TEXT = dict(hidden_size=48, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
            intermediate_size=64, vocab_size=128, bos_token_id=0, eos_token_id=1, pad_token_id=2,
            rope_parameters={"rope_type": "default", "mrope_section": [4, 4, 4], "rope_theta": 10000.0})

CONFIGS = {
    # The published shape in miniature: quick_gelu, 2x2 merge, 14-pixel patches, 2 frames per patch.
    "a": dict(vision=dict(depth=3, embed_dim=64, hidden_size=48, num_heads=4, mlp_ratio=4, in_channels=3,
                          patch_size=14, spatial_merge_size=2, temporal_patch_size=2, hidden_act="quick_gelu"),
              cases=[[(1, 8, 8)], [(1, 6, 10)], [(3, 4, 6)], [(1, 8, 8), (2, 4, 6), (1, 2, 2)]]),
    # Non-default sizes: 3x3 merge, 6-pixel patches, one frame per patch, 2 channels, mlp_ratio 2,
    # exact GELU and another rotary base.
    "b": dict(vision=dict(depth=2, embed_dim=48, hidden_size=40, num_heads=2, mlp_ratio=2, in_channels=2,
                          patch_size=6, spatial_merge_size=3, temporal_patch_size=1, hidden_act="gelu",
                          rope_parameters={"rope_type": "axial", "rope_theta": 500.0}),
              cases=[[(1, 9, 15), (2, 12, 6), (1, 3, 3)], [(1, 15, 21)]]),
}


def run_config(name, spec):
    torch.manual_seed(4321 + ord(name))
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    cfg = Qwen2VLConfig(vision_config=spec["vision"], text_config=TEXT)
    cfg.save_pretrained(d)
    vc = cfg.vision_config
    model = Qwen2VisionTransformerPretrainedModel._from_config(vc, attn_implementation="sdpa").eval()
    assert model.config._attn_implementation == "sdpa"
    randomize(model)
    save_file({"visual." + k: v.contiguous() for k, v in model.state_dict().items()},
              os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    patch_dim = vc.in_channels * vc.temporal_patch_size * vc.patch_size ** 2
    cases = {}
    for i, items in enumerate(spec["cases"]):
        grid = torch.tensor(items, dtype=torch.int64)
        n = int(grid.prod(-1).sum())
        pixels = torch.randn(n, patch_dim)
        with torch.no_grad():
            out = model(pixels, grid_thw=grid).pooler_output
        assert out.shape == (n // vc.spatial_merge_size ** 2, vc.hidden_size)
        cases[f"case{i}.pixel_values"] = pixels
        cases[f"case{i}.grid_thw"] = grid
        cases[f"case{i}.out"] = out.contiguous()
    save_file(cases, os.path.join(d, "cases.safetensors"))


for name, spec in CONFIGS.items():
    run_config(name, spec)
print("wrote", out_dir)
