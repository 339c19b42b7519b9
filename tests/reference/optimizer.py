"""Goldens for the optimizer pieces, from torch and transformers themselves:
adamw.safetensors   initial params, 5 steps of grads and lrs, params after each step of
                    torch.optim.AdamW(fused=True) and AdamW(foreach=False), with the decay /
                    no-decay groups the HF Trainer builds
decay.json          parameter name -> does Trainer.get_decay_parameter_names decay it
schedules.json      LambdaLR multipliers of transformers' schedule functions
clip.safetensors    grads before/after torch.nn.utils.clip_grad_norm_ and the total norms
"""
import json
import os
import sys
from types import SimpleNamespace

import torch
from safetensors.torch import save_file
from transformers import Trainer, TrainingArguments
from transformers.optimization import (get_constant_schedule_with_warmup,
                                       get_cosine_schedule_with_warmup,
                                       get_cosine_with_min_lr_schedule_with_warmup,
                                       get_linear_schedule_with_warmup)

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
torch.manual_seed(0)

# Names as our models spell them, plus a few that probe each pattern of the HF rule.
SHAPES = {
    "model.embed_tokens.weight": (6, 4),
    "model.layers.0.self_attn.q_proj.weight": (4, 4),
    "model.layers.0.self_attn.q_proj.bias": (4,),
    "model.layers.0.input_layernorm.weight": (4,),
    "model.layers.0.self_attn.q_norm.weight": (4,),
    "model.norm.weight": (4,),
    "visual.blocks.0.norm1.weight": (4,),
    "visual.merger.ln_q.weight": (4,),
    "lm_head.weight": (6, 4),
    "enorm.weight": (3,),
    "x.RMSNorm.scale": (2, 3),
}


def build_module(shapes):
    root = torch.nn.Module()
    for name, shape in shapes.items():
        *path, leaf = name.split(".")
        m = root
        for part in path:
            if not hasattr(m, part):
                m.add_module(part, torch.nn.Module())
            m = getattr(m, part)
        m.register_parameter(leaf, torch.nn.Parameter(torch.zeros(shape)))
    return root


model = build_module(SHAPES)
decay_names = set(Trainer.get_decay_parameter_names(None, model))
with open(os.path.join(out, "decay.json"), "w") as f:
    json.dump({n: n in decay_names for n in SHAPES}, f, indent=1)

# AdamW: 5 steps, changing lr, one parameter without a grad at step 3.
names = list(SHAPES)
init = {n: torch.randn(SHAPES[n]) for n in names}
STEPS = 5
lrs = [1e-2, 2e-2, 1.5e-2, 5e-3, 1e-2]
grads = [{n: torch.randn(SHAPES[n]) * (0.1 + s) for n in names} for s in range(STEPS)]
SKIP = ("lm_head.weight", 2)  # (param, step index) with no grad
cfg = dict(betas=(0.9, 0.95), eps=1e-6, weight_decay=0.1)
tensors = {}
for n in names:
    tensors[f"init.{n}"] = init[n]
    for s in range(STEPS):
        tensors[f"grad.{s}.{n}"] = grads[s][n]
tensors["lrs"] = torch.tensor(lrs, dtype=torch.float64)
for label, kwargs in (("fused", dict(fused=True)), ("single", dict(foreach=False, fused=False))):
    params = {n: torch.nn.Parameter(init[n].clone()) for n in names}
    groups = [
        {"params": [params[n] for n in names if n in decay_names], "weight_decay": cfg["weight_decay"]},
        {"params": [params[n] for n in names if n not in decay_names], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=lrs[0], betas=cfg["betas"], eps=cfg["eps"], **kwargs)
    for s in range(STEPS):
        for g in opt.param_groups:
            g["lr"] = lrs[s]
        for n in names:
            params[n].grad = None if (n, s) == SKIP else grads[s][n].clone()
        opt.step()
        for n in names:
            tensors[f"{label}.{s}.{n}"] = params[n].detach().clone()
    for n in names:
        st = opt.state[params[n]]
        tensors[f"{label}.exp_avg.{n}"] = st["exp_avg"]
        tensors[f"{label}.exp_avg_sq.{n}"] = st["exp_avg_sq"]
        tensors[f"{label}.step.{n}"] = st["step"].reshape([])
save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out, "adamw.safetensors"),
          metadata={"skip_param": SKIP[0], "skip_step": str(SKIP[1]), "beta1": "0.9", "beta2": "0.95",
                    "eps": "1e-06", "weight_decay": "0.1"})

# Schedules: LambdaLR's lr with base lr 1 is the multiplier itself.
def record(make, total):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=1.0)
    sched = make(opt)
    values = []
    for _ in range(total + 3):
        values.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    return values


def warmup_from_ratio(ratio, total):
    # TrainingArguments itself needs accelerate; its get_warmup_steps only reads warmup_steps
    # (a value below 1 is a ratio in transformers 5).
    return TrainingArguments.get_warmup_steps(SimpleNamespace(warmup_steps=ratio), total)


cases = []
for kind, warmup, ratio, total, min_lr in (
    ("cosine", 5, 0.0, 30, 0.0),
    ("cosine", 0, 0.0, 30, 0.0),
    ("cosine", 4, 0.0, 30, 0.1),
    ("cosine", 0, 0.1, 37, 0.0),
    ("linear", 5, 0.0, 30, 0.0),
    ("linear", 0, 0.25, 30, 0.0),
    ("constant", 5, 0.0, 30, 0.0),
    ("constant", 0, 0.0, 10, 0.0),
):
    w = warmup if warmup > 0 else warmup_from_ratio(ratio, total) if ratio > 0 else 0
    if kind == "cosine" and min_lr > 0:
        make = lambda o: get_cosine_with_min_lr_schedule_with_warmup(o, w, total, min_lr_rate=min_lr)
    elif kind == "cosine":
        make = lambda o: get_cosine_schedule_with_warmup(o, w, total)
    elif kind == "linear":
        make = lambda o: get_linear_schedule_with_warmup(o, w, total)
    else:
        make = lambda o: get_constant_schedule_with_warmup(o, w)
    cases.append(dict(kind=kind, warmup_steps=warmup, warmup_ratio=ratio, total_steps=total,
                      min_lr_ratio=min_lr, resolved_warmup=w, multipliers=record(make, total)))
with open(os.path.join(out, "schedules.json"), "w") as f:
    json.dump(cases, f, indent=1)

# Clipping: two dtypes (two foreach groups), one parameter without a grad.
clip = {}
shapes = [(5, 3), (7,), (2, 2, 2), (4,)]
dtypes = [torch.float32, torch.float64, torch.float32, torch.float32]
for case, max_norm in enumerate((1.0, 1e6, 0.5)):
    ps = [torch.nn.Parameter(torch.zeros(s, dtype=d)) for s, d in zip(shapes, dtypes)]
    for i, p in enumerate(ps[:3]):
        p.grad = torch.randn(p.shape, dtype=p.dtype) * (i + 1)
        clip[f"{case}.before.{i}"] = p.grad.clone()
    norm = torch.nn.utils.clip_grad_norm_(ps, max_norm)
    for i, p in enumerate(ps[:3]):
        clip[f"{case}.after.{i}"] = p.grad.clone()
    clip[f"{case}.norm"] = norm.reshape([1]).to(torch.float64)
    clip[f"{case}.max_norm"] = torch.tensor([max_norm], dtype=torch.float64)
save_file(clip, os.path.join(out, "clip.safetensors"))
print("optimizer goldens in", out)
