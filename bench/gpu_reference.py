"""Reference side of tests/gpu/gpu_check.cpp's benchmarks, on the same GPU in the same call:
one forward + backward of transformers' Qwen2.5-VL (bench/configs/qwen2_5_vl_7b_4_layers.json,
a 448x448 image and 3840 text tokens) and of diffusers' WanTransformer3DModel
(bench/configs/wan2_1_14b_2_blocks.json, 480p x 81 frames = 32760 tokens, 512 text tokens),
bf16 autocast over fp32 weights, median of synchronized steps after two warm-ups. Its model
FLOPs utilisation is gpu_check's model FLOPs of the same step (train/model_flops.h) over this
step time. Usage: gpu_reference.py SOURCE_DIR.""" 
import json, os, statistics, sys, time

import torch
import torch.nn.functional as F

source = sys.argv[1]
cuda = torch.device("cuda")


def time_steps(step, steps):
    for _ in range(2):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    ms = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        ms.append((time.perf_counter() - start) * 1e3)
    return statistics.median(ms), torch.cuda.max_memory_allocated() / 2**30


def bench_qwen():
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    with open(os.path.join(source, "bench/configs/qwen2_5_vl_7b_4_layers.json")) as f:
        config = Qwen2_5_VLConfig(**json.load(f))
    torch.manual_seed(0)
    with cuda:
        model = Qwen2_5_VLForConditionalGeneration(config)
    model.train()
    grid, text, merged = 32, 3840, 32 * 32 // 4
    g = torch.Generator().manual_seed(1)
    ids = torch.cat([torch.tensor([config.vision_start_token_id]), torch.full((merged,), config.image_token_id),
                     torch.tensor([config.vision_end_token_id]), torch.randint(0, 150000, (text,), generator=g)])
    input_ids = ids.unsqueeze(0).to(cuda)
    pixel_values = torch.randn(grid * grid, 3 * 2 * 14 * 14, generator=g).to(cuda)
    grid_thw = torch.tensor([[1, grid, grid]], device=cuda)
    tokens = ids.numel()

    def step():
        model.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=input_ids, pixel_values=pixel_values, image_grid_thw=grid_thw).logits
            loss = F.cross_entropy(logits[0, :-1].float(), input_ids[0, 1:], reduction="sum") / tokens
        loss.backward()

    ms, peak = time_steps(step, 5)
    print(json.dumps({"bench": "qwen2_5_vl_7b_4_layers.fwd_bwd_bf16", "impl": "transformers", "tokens": tokens,
                      "step_ms": ms, "tokens_per_s": tokens / (ms / 1e3), "peak_gib": peak}), flush=True)
    del model


def bench_wan():
    from diffusers import WanTransformer3DModel
    with open(os.path.join(source, "bench/configs/wan2_1_14b_2_blocks.json")) as f:
        config = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    torch.manual_seed(0)
    with cuda:
        model = WanTransformer3DModel(**config)
    model.train()
    g = torch.Generator().manual_seed(1)
    latents = torch.randn(1, 16, 21, 60, 104, generator=g).to(cuda)
    text = torch.randn(1, 512, 4096, generator=g).to(cuda)
    t = torch.tensor([500.0], device=cuda)
    tokens = 21 * 30 * 52

    def step():
        model.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(hidden_states=latents, timestep=t, encoder_hidden_states=text, return_dict=False)[0]
            loss = out.float().square().mean()
        loss.backward()

    ms, peak = time_steps(step, 3)
    print(json.dumps({"bench": "wan2_1_14b_2_blocks.fwd_bwd_bf16", "impl": "diffusers", "tokens": tokens,
                      "step_ms": ms, "tokens_per_s": tokens / (ms / 1e3), "peak_gib": peak}), flush=True)


for bench in (bench_qwen, bench_wan):
    try:
        bench()
    except Exception as e:  # report and go on: one missing reference must not hide the other
        print(json.dumps({"bench": bench.__name__, "impl": "reference", "error": repr(e)[:2000]}), flush=True)
    torch.cuda.empty_cache()
