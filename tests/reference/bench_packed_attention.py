"""The reference side of bench/bench_packed_attention.cpp: transformers' attention over packed
samples as a Qwen2 layer runs it with attn_implementation="sdpa" and packed position_ids (no
attention mask): the mask from transformers.masking_utils.create_causal_mask (it detects the
packing and builds the block-diagonal [seq, seq] mask) through
transformers.integrations.sdpa_attention.sdpa_attention_forward, forward + backward, fp32, at
the same shapes (16 query heads, 2 KV heads, head dim 128, 4096 tokens from 6 samples).
Usage: bench_packed_attention.py THREADS STEPS -> one JSON line on stdout."""
import json
import sys

import torch
from transformers import Qwen2Config
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import create_causal_mask

from bench_memory import peak_rss_mb, rss_now_mb
from bench_timing import median_ms



def main():
    threads, steps = int(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(threads)
    lengths = [512, 1024, 384, 768, 896, 512]
    heads, kv_heads, head_dim = 16, 2, 128
    seq = sum(lengths)
    config = Qwen2Config(hidden_size=heads * head_dim, num_attention_heads=heads, num_key_value_heads=kv_heads)
    config._attn_implementation = "sdpa"

    class Layer(torch.nn.Module):  # what sdpa_attention_forward reads of Qwen2Attention
        num_key_value_groups = heads // kv_heads
        is_causal = True

    layer = Layer()
    rss_before = rss_now_mb()
    torch.manual_seed(0)
    q = torch.randn(1, heads, seq, head_dim, requires_grad=True)
    k = torch.randn(1, kv_heads, seq, head_dim, requires_grad=True)
    v = torch.randn(1, kv_heads, seq, head_dim, requires_grad=True)
    upstream = torch.randn(1, seq, heads, head_dim)
    position_ids = torch.cat([torch.arange(n) for n in lengths])[None]

    def step():
        mask = create_causal_mask(config=config, inputs_embeds=torch.empty(1, seq, 1), attention_mask=None,
                                  past_key_values=None, position_ids=position_ids)
        out, _ = sdpa_attention_forward(layer, q, k, v, mask, scaling=head_dim ** -0.5)
        out.backward(upstream)

    median = median_ms(step, steps)
    peak = peak_rss_mb()
    print(json.dumps({"impl": "transformers_sdpa_packed", "tokens": seq, "step_ms": median,
                      "tokens_per_s": seq / (median / 1e3), "attention_rss_mb": peak - rss_before}))


if __name__ == "__main__":
    main()
