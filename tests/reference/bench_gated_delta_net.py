"""The reference side of bench/bench_gated_delta_net.cpp: transformers 5.17's Qwen3_5GatedDeltaNet
through its torch paths (torch_chunk_gated_delta_rule, causal_conv1d_fn; no FLA kernels) at the
same Qwen3.5-9B layer shapes, forward + backward, fp32, 2048 tokens. MODE "plain" is one sample;
"packed" runs the 4 samples (256, 768, 512, 512) one after the other, which is what a packed row
must compute (the torch path would let state and conv window cross the boundaries of a packed row).
Usage: bench_gated_delta_net.py THREADS STEPS plain|packed -> one JSON line on stdout."""
import json
import sys

import torch
from transformers import Qwen3_5TextConfig
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5GatedDeltaNet

from bench_memory import peak_rss_mb, rss_now_mb
from bench_timing import median_ms



def main():
    threads, steps, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = Qwen3_5TextConfig(hidden_size=4096, linear_num_key_heads=16, linear_num_value_heads=32,
                               linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
                               num_hidden_layers=1, layer_types=["linear_attention"])
    layer = Qwen3_5GatedDeltaNet(config, layer_idx=0).float()
    seq = 2048
    lengths = [256, 768, 512, 512] if mode == "packed" else [seq]
    rss_before = rss_now_mb()
    x = (torch.randn(1, seq, 4096) * 0.5).requires_grad_()
    upstream = torch.randn(1, seq, 4096)

    def step():
        layer.zero_grad()
        start = 0
        for n in lengths:
            layer(x[:, start:start + n]).backward(upstream[:, start:start + n])
            start += n

    median = median_ms(step, steps)
    peak = peak_rss_mb()
    print(json.dumps({"impl": f"transformers_{mode}", "tokens": seq, "step_ms": median,
                      "tokens_per_s": seq / (median / 1e3), "layer_rss_mb": peak - rss_before}))


if __name__ == "__main__":
    main()
