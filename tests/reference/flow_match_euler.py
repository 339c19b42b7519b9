"""Oracle: diffusers' FlowMatchEulerDiscreteScheduler (the flow-matching Euler sampler of Wan).

For each (shift, steps) case k in <out>/cases.safetensors: case<k>.config ([num_train_timesteps,
shift]), case<k>.timesteps, case<k>.sigmas, and a whole sampling loop on fixed tensors:
case<k>.sample0 (the start), case<k>.velocity<i> (the "model output" of step i) and
case<k>.after<i> (the sample after step i); case<k>.noised (scale_noise of sample0 at the
timestep of step 1 with case<k>.noise).
"""
import os, sys

import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from safetensors.torch import save_file

torch.manual_seed(0)
out_dir = sys.argv[1]
os.makedirs(out_dir, exist_ok=True)
tensors = {}
cases = [(1000, 1.0, 4), (1000, 3.0, 10), (1000, 5.0, 50), (1000, 12.0, 1), (500, 7.5, 7)]
for k, (train_steps, shift, steps) in enumerate(cases):
    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=train_steps, shift=shift)
    scheduler.set_timesteps(steps)
    p = f"case{k}."
    tensors[p + "config"] = torch.tensor([train_steps, shift], dtype=torch.float64)
    tensors[p + "timesteps"] = scheduler.timesteps.clone()
    tensors[p + "sigmas"] = scheduler.sigmas.clone()
    sample = torch.randn(2, 4, 3, 5, 6)
    tensors[p + "sample0"] = sample.clone()
    for i, t in enumerate(scheduler.timesteps):
        velocity = torch.randn_like(sample)
        sample = scheduler.step(velocity, t, sample, return_dict=False)[0]
        tensors[p + f"velocity{i}"] = velocity
        tensors[p + f"after{i}"] = sample.clone()
    noise = torch.randn_like(sample)
    step1 = scheduler.timesteps[min(1, steps - 1)].reshape(1)
    tensors[p + "noise"] = noise
    tensors[p + "noised"] = scheduler.scale_noise(tensors[p + "sample0"], step1, noise)
    tensors[p + "noised_sigma"] = scheduler.sigmas[min(1, steps - 1)].reshape(1)
save_file(tensors, os.path.join(out_dir, "cases.safetensors"))
print("ok")
