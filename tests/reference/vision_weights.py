"""Random weights of unit-scale activations for the Qwen vision-tower oracles, so that a wrong op
shows as a large difference: norm weights near 1, biases (norm biases too) small, matrices scaled
by their fan-in."""
import torch


def randomize(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ("norm" in name or "ln_q" in name) and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.2 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / p[0].numel() ** 0.5)
