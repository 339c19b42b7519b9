"""Oracle: the transformers Qwen2.5-VL vision tower (Qwen2_5_VisionTransformerPretrainedModel,
SDPA attention: the library's default) on tiny random weights.

For each config <name> in <out>/<name>/: config.json (a whole Qwen2_5_VLConfig, as save_pretrained
writes it), model.safetensors (the tower's weights with the "visual." prefix, as a full checkpoint
names them), and cases.safetensors with, per case i: case<i>.pixel_values, case<i>.grid_thw,
case<i>.window_index, case<i>.cu_seqlens, case<i>.cu_window_seqlens, case<i>.position_ids (the
reference's index helpers) and case<i>.out (the merged tokens, pooler_output, fp32). Config "a"
also has bf16 outputs from the same weights loaded in bfloat16: case<i>.out_bf16 (the default
Conv3d patch embedding) and case<i>.out_bf16_fused (transformers' fused Linear patch embedding).
"""
import os, sys

import torch
from safetensors.torch import save_file
from transformers import Qwen2_5_VLConfig
from transformers.utils.logging import disable_progress_bar
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel
from transformers.vision_utils import get_vision_cu_seqlens, get_vision_position_ids, get_vision_window_index
from vision_weights import randomize  # tests/reference/vision_weights.py

torch.set_num_threads(1)
disable_progress_bar()
out_dir = sys.argv[1]

TEXT = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
            intermediate_size=48, vocab_size=128, bos_token_id=0, eos_token_id=1, pad_token_id=2,
            rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 10000.0})

CONFIGS = {
    # 2x2 merged units per window (56 / 2 / 14); windowed blocks 0 and 2.
    "a": dict(vision=dict(depth=4, hidden_size=64, num_heads=4, intermediate_size=96, out_hidden_size=48,
                          patch_size=14, spatial_merge_size=2, temporal_patch_size=2, in_channels=3,
                          window_size=56, fullatt_block_indexes=[1, 3], hidden_act="silu"),
              # (t, h, w) per item; each inner list is one forward call.
              cases=[[(1, 8, 8)], [(1, 6, 10)], [(3, 4, 6)], [(1, 8, 8), (1, 6, 10), (2, 10, 14), (1, 2, 2)]],
              bf16=True),
    # Non-default spatial sizes: 3x3 merge, 6-pixel patches, one frame per temporal patch,
    # 2 channels, 3x3 merged units per window, gelu_pytorch_tanh, a non-default rotary base.
    "b": dict(vision=dict(depth=3, hidden_size=48, num_heads=2, intermediate_size=80, out_hidden_size=40,
                          patch_size=6, spatial_merge_size=3, temporal_patch_size=1, in_channels=2,
                          window_size=54, fullatt_block_indexes=[2], hidden_act="gelu_pytorch_tanh",
                          rope_parameters={"rope_type": "axial", "rope_theta": 500.0}),
              cases=[[(1, 9, 15), (2, 12, 6), (1, 3, 3)], [(1, 15, 21)]],
              bf16=False),
}


def run_config(name, spec):
    torch.manual_seed(1234 + ord(name))
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    cfg = Qwen2_5_VLConfig(vision_config=spec["vision"], text_config=TEXT)
    cfg.save_pretrained(d)
    vc = cfg.vision_config
    model = Qwen2_5_VisionTransformerPretrainedModel._from_config(vc, attn_implementation="sdpa").eval()
    assert model.config._attn_implementation == "sdpa"
    assert isinstance(model.patch_embed.proj, torch.nn.Conv3d)  # the unfused reference
    randomize(model)
    save_file({"visual." + k: v.contiguous() for k, v in model.state_dict().items()},
              os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    model_bf16 = None
    if spec["bf16"]:
        # Built in bf16 as from_pretrained(dtype=torch.bfloat16) builds it: parameters in bf16,
        # the rotary inv_freq buffer kept in fp32 (model.to(bfloat16) would round it as well).
        model_bf16 = Qwen2_5_VisionTransformerPretrainedModel._from_config(
            vc, attn_implementation="sdpa", dtype=torch.bfloat16).eval()
        model_bf16.load_state_dict(model.state_dict())
        assert model_bf16.rotary_pos_emb.inv_freq.dtype == torch.float32
        assert model_bf16.blocks[0].attn.qkv.weight.dtype == torch.bfloat16
        model.save_pretrained(os.path.join(d, "hf_vision_model"))  # for add_fused_bf16
    patch_dim = vc.in_channels * vc.temporal_patch_size * vc.patch_size ** 2
    cases = {}
    for i, items in enumerate(spec["cases"]):
        grid = torch.tensor(items, dtype=torch.int64)
        n = int(grid.prod(-1).sum())
        pixels = torch.randn(n, patch_dim)
        with torch.no_grad():
            res = model(pixels, grid_thw=grid)
            # pooler_output holds the merged tokens in processor order; last_hidden_state is the
            # unmerged sequence still in window order.
            assert res.pooler_output.shape == (n // vc.spatial_merge_size ** 2, vc.out_hidden_size)
            cases[f"case{i}.out"] = res.pooler_output.contiguous()
            if model_bf16 is not None:
                cases[f"case{i}.out_bf16"] = model_bf16(pixels, grid_thw=grid).pooler_output.contiguous()
        window_index, cu_window = get_vision_window_index(grid, vc.spatial_merge_size, vc.window_size, vc.patch_size)
        cases[f"case{i}.pixel_values"] = pixels
        cases[f"case{i}.grid_thw"] = grid
        cases[f"case{i}.window_index"] = window_index.to(torch.int64)
        cases[f"case{i}.cu_window_seqlens"] = cu_window.to(torch.int64)
        cases[f"case{i}.cu_seqlens"] = get_vision_cu_seqlens(grid).to(torch.int64)
        cases[f"case{i}.position_ids"] = get_vision_position_ids(grid, vc.spatial_merge_size).to(torch.int64)
    return cases


def add_fused_bf16(name, cases):
    """transformers' own fused patch embedding (fusion_config patch_embeddings: the Conv3d as a
    Linear on the flattened patch), the computation our encoder does; in bf16 it rounds
    differently from the Conv3d. Runs after every unfused model: the fusion patches the patch
    embedding class for the rest of the process."""
    model = Qwen2_5_VisionTransformerPretrainedModel.from_pretrained(
        os.path.join(out_dir, name, "hf_vision_model"), dtype=torch.bfloat16, attn_implementation="sdpa",
        fusion_config={"patch_embeddings": True}).eval()
    assert hasattr(model.patch_embed, "linear_proj")
    assert model.rotary_pos_emb.inv_freq.dtype == torch.float32
    for i in range(len(CONFIGS[name]["cases"])):
        with torch.no_grad():
            out = model(cases[f"case{i}.pixel_values"], grid_thw=cases[f"case{i}.grid_thw"]).pooler_output
        cases[f"case{i}.out_bf16_fused"] = out.contiguous()


all_cases = {name: run_config(name, spec) for name, spec in CONFIGS.items()}
for name, spec in CONFIGS.items():
    if spec["bf16"]:
        add_fused_bf16(name, all_cases[name])
    save_file(all_cases[name], os.path.join(out_dir, name, "cases.safetensors"))
print("wrote", out_dir)
