"""Oracle: the flow-matching training objective as diffusers' training scripts build it.

For each case k in <out>/cases.safetensors: case<k>.config ([N, shift, scheme, logit_mean,
logit_std, mode_scale, weighting, seed] float64, schemes/weightings by index), case<k>.u (the
density draws from torch.Generator().manual_seed(seed)), case<k>.latents / noise / prediction
(inputs), and the results: case<k>.sigmas, .timesteps, .noisy, .target, .weights, .loss. Also
table<k> = the scheduler's training sigmas.
"""
import os, sys

import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.training_utils import compute_density_for_timestep_sampling, compute_loss_weighting_for_sd3
from safetensors.torch import save_file

SCHEMES = ["uniform", "logit_normal", "mode"]
WEIGHTINGS = ["none", "sigma_sqrt", "cosmap"]

out_dir = sys.argv[1]
os.makedirs(out_dir, exist_ok=True)
torch.manual_seed(0)
tensors = {}
cases = [  # (N, shift, scheme, logit_mean, logit_std, mode_scale, weighting, seed, batch)
    (1000, 5.0, "uniform", 0.0, 1.0, 1.29, "none", 0, 4),
    (1000, 3.0, "logit_normal", 0.0, 1.0, 1.29, "sigma_sqrt", 7, 3),
    (1000, 1.0, "logit_normal", 0.5, 0.8, 1.29, "cosmap", 11, 5),
    (500, 8.0, "mode", 0.0, 1.0, 1.29, "none", 3, 2),
]
for k, (n, shift, scheme, mean, std, mode_scale, weighting, seed, batch) in enumerate(cases):
    p = f"case{k}."
    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=n, shift=shift)
    generator = torch.Generator().manual_seed(seed)
    u = compute_density_for_timestep_sampling(scheme, batch, logit_mean=mean, logit_std=std, mode_scale=mode_scale,
                                              generator=generator)
    indices = (u * scheduler.config.num_train_timesteps).long()
    timesteps = scheduler.timesteps[indices]
    # The scripts' get_sigmas: the sigma whose timestep equals t.
    step_indices = [(scheduler.timesteps == t).nonzero().item() for t in timesteps]
    latents = torch.randn(batch, 4, 3, 4, 5)
    noise = torch.randn_like(latents)
    prediction = torch.randn_like(latents)
    sigmas = scheduler.sigmas[step_indices].flatten()
    while sigmas.ndim < latents.ndim:
        sigmas = sigmas.unsqueeze(-1)
    noisy = (1.0 - sigmas) * latents + sigmas * noise
    target = noise - latents
    weights = compute_loss_weighting_for_sd3(weighting_scheme=weighting, sigmas=sigmas)
    loss = torch.mean((weights.float() * (prediction.float() - target.float()) ** 2).reshape(batch, -1), 1).mean()
    tensors[p + "config"] = torch.tensor([n, shift, SCHEMES.index(scheme), mean, std, mode_scale,
                                          WEIGHTINGS.index(weighting), seed], dtype=torch.float64)
    tensors[p + "u"] = u
    tensors[p + "latents"] = latents
    tensors[p + "noise"] = noise
    tensors[p + "prediction"] = prediction
    tensors[p + "sigmas"] = sigmas.flatten().clone()
    tensors[p + "timesteps"] = timesteps.clone()
    tensors[p + "noisy"] = noisy
    tensors[p + "target"] = target
    tensors[p + "weights"] = weights.flatten().float().clone()
    tensors[p + "loss"] = loss.reshape(1)
    tensors[f"table{k}"] = scheduler.sigmas.clone()
save_file(tensors, os.path.join(out_dir, "cases.safetensors"))
print("ok")
