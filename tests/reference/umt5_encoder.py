"""Oracle: transformers' UMT5EncoderModel (the Wan text encoder) on tiny random weights.

Writes <out>/<name>/ for each config: config.json + model.safetensors (save_pretrained) and
cases.safetensors with, per case i: case<i>.input_ids, case<i>.attention_mask and case<i>.out
(last_hidden_state, fp32), plus buckets.relative / buckets.ids (T5's relative position buckets
for distances -300..300 with the config's buckets and max distance).
Config "a" is gated-gelu with sequences longer than max_distance; "b" an ungated relu one with
d_kv * num_heads != d_model.
"""
import os, sys

import torch
from safetensors.torch import save_file
from transformers import UMT5Config, UMT5EncoderModel
from transformers.utils.logging import disable_progress_bar

torch.set_num_threads(1)
disable_progress_bar()
out_dir = sys.argv[1]

CONFIGS = {
    "a": dict(vocab_size=120, d_model=32, d_kv=8, d_ff=48, num_layers=3, num_heads=4,
              relative_attention_num_buckets=32, relative_attention_max_distance=20,
              feed_forward_proj="gated-gelu"),
    "b": dict(vocab_size=90, d_model=24, d_kv=10, d_ff=40, num_layers=2, num_heads=3,
              relative_attention_num_buckets=16, relative_attention_max_distance=40,
              feed_forward_proj="relu"),
}

for name, kwargs in CONFIGS.items():
    torch.manual_seed(len(name) * 7 + ord(name))
    config = UMT5Config(**kwargs, dropout_rate=0.0)
    model = UMT5EncoderModel(config).eval()
    with torch.no_grad():  # unit-scale activations, so that a wrong op shows as a large difference
        for pname, p in model.named_parameters():
            if "layer_norm" in pname:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif "relative_attention_bias" in pname:
                p.copy_(torch.randn_like(p))
            elif pname == "shared.weight":
                p.copy_(torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / p.shape[1] ** 0.5)
    target = os.path.join(out_dir, name)
    model.save_pretrained(target)
    tensors = {}
    cases = [(1, [37]), (2, [45, 12]), (3, [5, 60, 1])]
    for i, (batch, lengths) in enumerate(cases):
        width = max(lengths)
        ids = torch.randint(2, config.vocab_size, (batch, width))
        mask = torch.zeros(batch, width, dtype=torch.long)
        for r, n in enumerate(lengths):
            mask[r, :n] = 1
            ids[r, n:] = 0  # pad id
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask).last_hidden_state
        tensors[f"case{i}.input_ids"] = ids
        tensors[f"case{i}.attention_mask"] = mask
        tensors[f"case{i}.out"] = out.contiguous()
    attention = model.encoder.block[0].layer[0].SelfAttention
    relative = torch.arange(-300, 301).view(1, -1)
    tensors["buckets.relative"] = relative
    tensors["buckets.ids"] = attention._relative_position_bucket(relative)
    save_file(tensors, os.path.join(target, "cases.safetensors"))
print("ok")
