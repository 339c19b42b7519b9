"""Oracle: tiny random Qwen-VL models (Qwen2.5-VL, Qwen2-VL, Qwen3-VL, Qwen3-VL-MoE, Qwen3.5 or
Qwen3.5-MoE) from transformers, their logits and greedy generations. Run by qwen2_5_vl_model.py,
qwen2_vl_model.py, qwen3_vl_model.py, qwen3_vl_moe_model.py, qwen3_5_model.py and
qwen3_5_moe_model.py: main(family, out).

Writes into <out>:
  A/          config A (GQA 4:2, untied lm_head) via save_pretrained (published weight names)
  A_sharded/  the same weights, save_pretrained with a small max_shard_size (index + shards)
  B/          config B (MQA 4:1, tied embeddings): module-tree weight names (model.language_model.*,
              model.visual.*) and the published config.json layout (flat for Qwen2-VL and
              Qwen2.5-VL; for Qwen3-VL a nested text_config with rope_scaling and rope_theta, and a
              vision_config without rope_parameters; for Qwen3.5, published in the transformers 5
              era, transformers 5's own layout); transformers reloads it here and must
              reproduce the logits, so the layout is one the reference accepts
  Qwen3-VL's (and Qwen3.5's) videos are laid out as its processor lays them out: each frame its own placeholder
  run between timestamp text ("<t seconds>" tokens) and vision start/end tokens.
  cases_A.safetensors, cases_B.safetensors: per case <case>.<field> tensors
     input_ids, attention_mask, pixel_values, image_grid_thw, pixel_values_videos,
     video_grid_thw, second_per_grid_ts (those that apply), position_ids [3,B,S] and
     rope_deltas [B,1] from get_rope_index, logits [B,S,V] fp32, generated [B,32] (greedy),
     min_margin (smallest top-1/top-2 logit gap along the greedy path); the text and image_video
     cases also logits_bf16 (fp32 values of transformers' logits with the checkpoint loaded in bf16)
  cases_A.safetensors also holds stop.generated / stop.stop_id: greedy generation of the image
  case with eos_token_id = the 11th greedy token (the reference stops after its first occurrence).
  Qwen2-VL's video cases carry second_per_grid_ts too (its processor's siblings give them); the
  reference model takes none, and its positions must not depend on them.
"""
import copy, json, os

import torch
from safetensors.torch import save_file
from transformers import (Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2VLConfig,
                          Qwen2VLForConditionalGeneration, Qwen3_5Config, Qwen3_5ForConditionalGeneration,
                          Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration,
                          Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLMoeConfig,
                          Qwen3VLMoeForConditionalGeneration)

NEW_TOKENS = 32

QWEN2_5_VL_CONFIGS = {
    "A": dict(
        vision=dict(depth=4, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64, patch_size=14,
                    window_size=56, fullatt_block_indexes=[1, 3], tokens_per_second=4, initializer_range=0.1),
        text=dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, rms_norm_eps=1e-6, initializer_range=0.1, bos_token_id=1, eos_token_id=2,
                  rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 3, 3])),
        tokens=dict(image_token_id=290, video_token_id=291, vision_start_token_id=292, vision_end_token_id=293),
        tie=False, seed=1234),
    "B": dict(
        vision=dict(depth=3, hidden_size=48, intermediate_size=64, num_heads=3, out_hidden_size=96, patch_size=8,
                    window_size=32, fullatt_block_indexes=[0], tokens_per_second=2, initializer_range=0.1),
        text=dict(vocab_size=320, hidden_size=96, intermediate_size=160, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=1, rms_norm_eps=1e-6, initializer_range=0.1, bos_token_id=1, eos_token_id=2,
                  rope_parameters=dict(rope_type="default", rope_theta=1000000.0, mrope_section=[4, 4, 4])),
        tokens=dict(image_token_id=310, video_token_id=311, vision_start_token_id=312, vision_end_token_id=313),
        tie=True, seed=4321),
}

# Qwen2-VL: the same decoders; its vision tower (LayerNorm, fc1/fc2 MLP, no windows) has its own keys.
QWEN2_VL_CONFIGS = {
    "A": dict(QWEN2_5_VL_CONFIGS["A"],
              vision=dict(depth=3, embed_dim=32, hidden_size=64, mlp_ratio=2, num_heads=2, patch_size=14,
                          initializer_range=0.1),
              seed=2468),
    "B": dict(QWEN2_5_VL_CONFIGS["B"],
              vision=dict(depth=2, embed_dim=48, hidden_size=96, mlp_ratio=3, num_heads=3, patch_size=8,
                          initializer_range=0.1),
              seed=8642),
}

# Qwen3-VL: learned position table, DeepStack, 16-pixel patches; a Qwen3 decoder (q/k norms, a
# head_dim of its own, no biases) with interleaved M-RoPE. The position tables are smaller than
# some grids (4 x 4 and 3 x 3 against grids up to 8 x 8) so that they are resampled both ways.
# No eos_token_id in the text configs: generate() would stop at it even with the generation
# config's eos_token_id set to None (transformers 5 fills unset values from the model's own).
QWEN3_VL_CONFIGS = {
    "A": dict(
        vision=dict(depth=3, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64, patch_size=16,
                    num_position_embeddings=16, deepstack_visual_indexes=[0, 2], initializer_range=0.1),
        text=dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=24, rms_norm_eps=1e-6, initializer_range=0.1, bos_token_id=1,
                  rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=[4, 4, 4],
                                       mrope_interleaved=True)),
        tokens=dict(image_token_id=290, video_token_id=291, vision_start_token_id=292, vision_end_token_id=293),
        tie=False, seed=1357),
    "B": dict(
        vision=dict(depth=2, hidden_size=48, intermediate_size=64, num_heads=3, out_hidden_size=96, patch_size=16,
                    num_position_embeddings=9, deepstack_visual_indexes=[1], hidden_act="gelu_pytorch_tanh",
                    initializer_range=0.1),
        text=dict(vocab_size=320, hidden_size=96, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=1, head_dim=32, rms_norm_eps=1e-6, initializer_range=0.1, bos_token_id=1,
                  rope_parameters=dict(rope_type="default", rope_theta=5000000.0, mrope_section=[6, 5, 5],
                                       mrope_interleaved=True)),
        tokens=dict(image_token_id=310, video_token_id=311, vision_start_token_id=312, vision_end_token_id=313),
        tie=True, seed=9753),
}

# Qwen3-VL-MoE: Qwen3-VL's tower and decoder with sparse MoE layers (a router over 4 or 6 experts,
# top 2; config A keeps layer 1 dense); its checkpoints hold each layer's experts fused (sizes with
# hidden != 2 * moe_intermediate_size, so that the fused layouts are told apart by shape).
QWEN3_VL_MOE_CONFIGS = {
    "A": dict(QWEN3_VL_CONFIGS["A"],
              text=dict(QWEN3_VL_CONFIGS["A"]["text"], num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24,
                        mlp_only_layers=[1]),
              seed=2468),
    "B": dict(QWEN3_VL_CONFIGS["B"],
              text=dict(QWEN3_VL_CONFIGS["B"]["text"], num_experts=6, num_experts_per_tok=2, moe_intermediate_size=40),
              seed=8642),
}

# Qwen3.5: Qwen3-VL's tower without DeepStack, the hybrid decoder. A: the published pattern (three
# Gated DeltaNet layers, then gated attention) with quarter rotary over head_dim 32 (mrope_section
# [1, 1, 2] of the 4 rotary frequencies), 2:1 grouped DeltaNet heads; B: attention first and every
# other layer, half rotary over head_dim 32 ([3, 3, 2]), tied embeddings, DeltaNet conv kernel 3.
def _qwen3_5_vision(spec):
    return {k: v for k, v in spec.items() if k != "deepstack_visual_indexes"}


QWEN3_5_CONFIGS = {
    "A": dict(
        vision=_qwen3_5_vision(QWEN3_VL_CONFIGS["A"]["vision"]),
        text=dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6, initializer_range=0.1, bos_token_id=1,
                  linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=12,
                  linear_conv_kernel_dim=4,
                  rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=[1, 1, 2],
                                       mrope_interleaved=True, partial_rotary_factor=0.25)),
        tokens=QWEN3_VL_CONFIGS["A"]["tokens"], tie=False, seed=3579),
    "B": dict(
        vision=_qwen3_5_vision(QWEN3_VL_CONFIGS["B"]["vision"]),
        text=dict(vocab_size=320, hidden_size=96, intermediate_size=160, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=1, head_dim=32, rms_norm_eps=1e-6, initializer_range=0.1, bos_token_id=1,
                  layer_types=["full_attention", "linear_attention", "full_attention", "linear_attention"],
                  linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=16, linear_value_head_dim=16,
                  linear_conv_kernel_dim=3,
                  rope_parameters=dict(rope_type="default", rope_theta=5000000.0, mrope_section=[3, 3, 2],
                                       mrope_interleaved=True, partial_rotary_factor=0.5)),
        tokens=QWEN3_VL_CONFIGS["B"]["tokens"], tie=True, seed=9531),
}

# Qwen3.5-MoE: the Qwen3.5 configs with every layer sparse (a router over 4 or 6 experts, top 2,
# renormalised) beside a gated shared expert.
QWEN3_5_MOE_CONFIGS = {
    "A": dict(QWEN3_5_CONFIGS["A"],
              text=dict(QWEN3_5_CONFIGS["A"]["text"], num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24,
                        shared_expert_intermediate_size=40),
              seed=4680),
    "B": dict(QWEN3_5_CONFIGS["B"],
              text=dict(QWEN3_5_CONFIGS["B"]["text"], num_experts=6, num_experts_per_tok=2, moe_intermediate_size=40,
                        shared_expert_intermediate_size=56),
              seed=6804),
}

FAMILIES = {"qwen2_5_vl": (QWEN2_5_VL_CONFIGS, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration),
            "qwen2_vl": (QWEN2_VL_CONFIGS, Qwen2VLConfig, Qwen2VLForConditionalGeneration),
            "qwen3_vl": (QWEN3_VL_CONFIGS, Qwen3VLConfig, Qwen3VLForConditionalGeneration),
            "qwen3_vl_moe": (QWEN3_VL_MOE_CONFIGS, Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration),
            "qwen3_5": (QWEN3_5_CONFIGS, Qwen3_5Config, Qwen3_5ForConditionalGeneration),
            "qwen3_5_moe": (QWEN3_5_MOE_CONFIGS, Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration)}


def build(family, spec):
    _, config_class, model_class = FAMILIES[family]
    cfg = config_class(vision_config=spec["vision"], text_config=spec["text"],
                       tie_word_embeddings=spec["tie"], **spec["tokens"])
    torch.manual_seed(spec["seed"])
    return model_class(cfg).eval()


def make_cases(spec, gen, frames_apart=False):
    """Token ids laid out as the processor does: <vs> + pad * n + <ve> around text; with
    frames_apart (Qwen3-VL) a video is, per frame, timestamp text + <vs> + frame pads + <ve>."""
    t = spec["tokens"]
    v = spec["vision"]
    row = 3 * 2 * v["patch_size"] ** 2
    text = lambda n: torch.randint(3, 280, (n,), generator=gen).tolist()

    def vision(kind, grid):
        pad = t["image_token_id"] if kind == "image" else t["video_token_id"]
        run = lambda n: [t["vision_start_token_id"]] + [pad] * n + [t["vision_end_token_id"]]
        if kind == "video" and frames_apart:
            ids = []
            for _ in range(grid[0]):
                ids += text(3) + run(grid[1] * grid[2] // 4)  # "<0.5 seconds>" as three tokens
            return ids
        return run(grid[0] * grid[1] * grid[2] // 4)

    def pixels(grids):
        return torch.randn(sum(a * b * c for a, b, c in grids), row, generator=gen)

    def case(pieces, images=(), videos=(), seconds=None):
        ids = []
        for p in pieces:
            ids += p
        c = {"input_ids": torch.tensor([ids])}
        if images:
            c["pixel_values"] = pixels(images)
            c["image_grid_thw"] = torch.tensor(images)
        if videos:
            c["pixel_values_videos"] = pixels(videos)
            c["video_grid_thw"] = torch.tensor(videos)
            c["second_per_grid_ts"] = torch.tensor(seconds, dtype=torch.float64)
        return c

    img1, img2, img3 = (1, 6, 8), (1, 4, 4), (1, 8, 6)
    vid1, vid2 = (3, 4, 6), (2, 6, 4)
    cases = {
        "text": case([[1] + text(23)]),
        "image": case([[1] + text(5), vision("image", img1), text(7)], images=[img1]),
        "two_images": case([[1] + text(3), vision("image", img2), text(2), vision("image", img3), text(5)],
                           images=[img2, img3]),
        "video": case([[1] + text(4), vision("video", vid1), text(6)], videos=[vid1], seconds=[2.0]),
        # 1.5 s per grid: the reference truncates it to 1 before scaling by tokens_per_second.
        "image_video": case([[1] + text(2), vision("image", img2), text(3), vision("video", vid2), text(4)],
                            images=[img2], videos=[vid2], seconds=[1.5]),
    }
    # A left-padded batch: an image prompt and a (longer) video prompt.
    a = [1] + text(4) + vision("image", img2) + text(3)
    b = [1] + text(2) + vision("video", vid1) + text(5)
    width = max(len(a), len(b))
    ids = torch.zeros(2, width, dtype=torch.long)
    mask = torch.zeros(2, width, dtype=torch.long)
    for r, seq in enumerate((a, b)):
        ids[r, width - len(seq):] = torch.tensor(seq)
        mask[r, width - len(seq):] = 1
    cases["batch"] = {"input_ids": ids, "attention_mask": mask, "pixel_values": pixels([img2]),
                      "image_grid_thw": torch.tensor([img2]), "pixel_values_videos": pixels([vid1]),
                      "video_grid_thw": torch.tensor([vid1]),
                      "second_per_grid_ts": torch.tensor([2.0], dtype=torch.float64)}
    return cases


def model_kwargs(family, spec, c):
    kw = {k: v for k, v in c.items() if k != "second_per_grid_ts"}
    kw.setdefault("attention_mask", torch.ones_like(c["input_ids"]))
    if "second_per_grid_ts" in c and family == "qwen2_5_vl":
        kw["second_per_grid_ts"] = c["second_per_grid_ts"].float()
    t = spec["tokens"]
    ids = c["input_ids"]
    kw["mm_token_type_ids"] = ((ids == t["image_token_id"]).int() + 2 * (ids == t["video_token_id"]).int())
    return kw


def greedy(model, kw, eos=None):
    gc = copy.deepcopy(model.generation_config)
    gc.eos_token_id = eos
    gc.pad_token_id = 0
    gc.do_sample = False
    gc.max_new_tokens = NEW_TOKENS
    gc.output_logits = True
    gc.return_dict_in_generate = True
    model.model.rope_deltas = None
    res = model.generate(**kw, generation_config=gc)
    new = res.sequences[:, kw["input_ids"].shape[1]:]
    margins = [torch.topk(l.float(), 2, dim=-1).values for l in res.logits]
    margin = min(float((m[:, 0] - m[:, 1]).min()) for m in margins)
    return new, margin


def cases_for(family, spec):
    frames_apart = family.startswith("qwen3_vl") or family.startswith("qwen3_5")
    return make_cases(spec, torch.Generator().manual_seed(spec["seed"] + 1), frames_apart=frames_apart)


def record(family, name, spec, model):
    golden = {}
    for case, c in cases_for(family, spec).items():
        kw = model_kwargs(family, spec, c)
        with torch.no_grad():
            model.model.rope_deltas = None
            # The positions generate uses: get_rope_index over the real tokens (what our forward does too).
            pos = model._prepare_position_ids_for_generation(kw["input_ids"], dict(kw))
            deltas = model.model.rope_deltas
            logits = model(**kw, position_ids=pos, use_cache=False).logits
            if "attention_mask" not in c:
                # Without padding the plain forward (positions computed inside) must agree.
                model.model.rope_deltas = None
                plain = model(**kw, use_cache=False).logits
                assert torch.equal(plain, logits), case
            new, margin = greedy(model, kw)
        assert new.shape[1] == NEW_TOKENS
        for k, v in c.items():
            golden[f"{case}.{k}"] = v
        golden[f"{case}.position_ids"] = pos[1:].contiguous()
        golden[f"{case}.rope_deltas"] = deltas
        golden[f"{case}.logits"] = logits.float()
        golden[f"{case}.generated"] = new
        golden[f"{case}.min_margin"] = torch.tensor(margin)
        print(f"{name}/{case}: seq {c['input_ids'].shape[1]}, min top-2 margin {margin:.4g}")
        if name == "A" and case == "image":
            stop_id = int(new[0, 10])
            with torch.no_grad():
                stopped, _ = greedy(model, kw, eos=stop_id)
            golden["stop.generated"] = stopped
            golden["stop.stop_id"] = torch.tensor(stop_id)
    return golden


def flat_published_config(model):
    """config.json as the published Qwen-VL checkpoints have it: text fields at the top level."""
    c = model.config.to_dict()
    text = c.pop("text_config")
    flat = {k: v for k, v in c.items() if k != "rope_parameters"}
    for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "hidden_act", "max_position_embeddings", "rms_norm_eps", "bos_token_id",
              "eos_token_id", "use_sliding_window", "sliding_window", "max_window_layers", "attention_dropout"):
        flat[k] = text[k]
    rope = text["rope_parameters"]
    flat["rope_theta"] = rope["rope_theta"]
    flat["rope_scaling"] = {"type": "mrope", "mrope_section": rope["mrope_section"]}
    return flat


def published_qwen3_vl_config(model):
    """config.json as the published Qwen3-VL checkpoints have it: text_config with rope_scaling and
    rope_theta, a vision_config without rope_parameters (the default axial rotary)."""
    c = model.config.to_dict()
    text = c["text_config"]
    rope = text.pop("rope_parameters")
    text["rope_theta"] = rope["rope_theta"]
    text["rope_scaling"] = {"mrope_interleaved": True, "mrope_section": rope["mrope_section"], "rope_type": "default"}
    c["vision_config"].pop("rope_parameters", None)
    return c


def main(family, out):
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)
    configs, _, model_class = FAMILIES[family]
    for name, spec in configs.items():
        model = build(family, spec)
        golden = record(family, name, spec, model)
        used = {int(t) for k, v in golden.items() if k.endswith(".generated") for t in v.flatten()}
        eos = next(t for t in range(spec["text"]["vocab_size"] - 1, 0, -1) if t not in used)
        directory = os.path.join(out, name)
        if name == "A":
            model.save_pretrained(directory)
            model.save_pretrained(os.path.join(out, "A_sharded"), max_shard_size="200KB")
            assert os.path.exists(os.path.join(out, "A_sharded", "model.safetensors.index.json"))
        else:
            os.makedirs(directory, exist_ok=True)
            state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
            assert any(k.startswith("model.language_model.") for k in state)
            save_file(state, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
            if family.startswith("qwen3_5"):
                published = model.config.to_dict()
            elif family.startswith("qwen3_vl"):
                published = published_qwen3_vl_config(model)
            else:
                published = flat_published_config(model)
            with open(os.path.join(directory, "config.json"), "w") as f:
                json.dump(published, f, indent=2)
            reloaded = model_class.from_pretrained(directory).eval()
            c = cases_for(family, spec)["image_video"]
            with torch.no_grad():
                a = reloaded(**model_kwargs(family, spec, c), use_cache=False).logits
            assert torch.allclose(a, golden["image_video.logits"], atol=1e-6), "B layout did not reload in transformers"
        # Generation stops at generation_config.json's eos (absent from every greedy run above).
        with open(os.path.join(directory, "generation_config.json"), "w") as f:
            json.dump({"bos_token_id": 1, "eos_token_id": [eos], "pad_token_id": 0}, f)
        golden["eos_token_id"] = torch.tensor(eos)
        # transformers' own bf16 error: the saved checkpoint loaded in bf16 as a user would, two cases.
        bf16 = model_class.from_pretrained(directory, dtype=torch.bfloat16).eval()
        for case, c in cases_for(family, spec).items():
            if case not in ("text", "image_video"):
                continue
            kw = model_kwargs(family, spec, c)
            with torch.no_grad():
                bf16.model.rope_deltas = None
                pos = bf16._prepare_position_ids_for_generation(kw["input_ids"], dict(kw))
                golden[f"{case}.logits_bf16"] = bf16(**kw, position_ids=pos, use_cache=False).logits.float()
        save_file({k: v.contiguous() for k, v in golden.items()}, os.path.join(out, f"cases_{name}.safetensors"))

    # Logits warpers as generate(do_sample=True) builds them (temperature, top-k, top-p, in that order).
    from transformers.generation.logits_process import LogitsProcessorList
    from transformers import GenerationConfig
    gen = torch.Generator().manual_seed(7)
    warp = {"logits": torch.randn(3, 300, generator=gen)}
    settings = {"t07_k20_p08": dict(temperature=0.7, top_k=20, top_p=0.8), "p05": dict(top_p=0.5, top_k=0),
                "k5": dict(top_k=5), "t2": dict(temperature=2.0, top_k=0)}
    helper = build(family, configs["A"])
    for key, kw in settings.items():
        gc = GenerationConfig(do_sample=True, **kw)
        procs = helper._get_logits_processor(generation_config=gc, input_ids_seq_length=1,
                                             logits_processor=LogitsProcessorList())
        warp[key] = procs(torch.zeros(3, 1, dtype=torch.long), warp["logits"].clone())
    save_file(warp, os.path.join(out, "warp.safetensors"))
    print("ok")
