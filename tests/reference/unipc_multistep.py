"""Oracle: diffusers' UniPCMultistepScheduler in flow-matching mode (Wan's sampler).

For each case k in <out>/cases.safetensors: case<k>.timesteps, case<k>.sigmas, and a sampling
loop on fixed tensors: case<k>.sample0, case<k>.velocity<i>, case<k>.after<i>. The scheduler
settings of case k are in <out>/case<k>.json (diffusers' config keys).
"""
import json, os, sys

import torch
from diffusers import UniPCMultistepScheduler
from safetensors.torch import save_file

torch.manual_seed(0)
out_dir = sys.argv[1]
os.makedirs(out_dir, exist_ok=True)
WAN = dict(num_train_timesteps=1000, prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0,
           solver_order=2, solver_type="bh2", lower_order_final=True, predict_x0=True, final_sigmas_type="zero")
cases = [
    (dict(WAN), 4),
    (dict(WAN, flow_shift=5.0), 10),
    (dict(WAN, flow_shift=1.0), 6),  # the first sigma nudged below 1
    (dict(WAN, solver_order=3), 8),
    # bh1 with a final sigma of 0 makes diffusers multiply -inf by 0 (NaN) in the last step: sigma_min.
    (dict(WAN, solver_type="bh1", disable_corrector=[0, 2], final_sigmas_type="sigma_min"), 7),
    (dict(WAN, final_sigmas_type="sigma_min", lower_order_final=False), 5),
    (dict(WAN, solver_order=1), 3),
    (dict(WAN), 1),
]
tensors = {}
for k, (config, steps) in enumerate(cases):
    scheduler = UniPCMultistepScheduler(**config)
    scheduler.set_timesteps(steps)
    p = f"case{k}."
    tensors[p + "timesteps"] = scheduler.timesteps.clone()
    tensors[p + "sigmas"] = scheduler.sigmas.clone()
    sample = torch.randn(2, 4, 3, 5, 6)
    tensors[p + "sample0"] = sample.clone()
    for i, t in enumerate(scheduler.timesteps):
        velocity = torch.randn_like(sample)
        sample = scheduler.step(velocity, t, sample, return_dict=False)[0]
        tensors[p + f"velocity{i}"] = velocity
        tensors[p + f"after{i}"] = sample.clone()
    with open(os.path.join(out_dir, f"case{k}.json"), "w") as f:
        json.dump(dict(scheduler.config), f)
save_file(tensors, os.path.join(out_dir, "cases.safetensors"))
print("ok")
