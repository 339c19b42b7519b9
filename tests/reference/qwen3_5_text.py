"""Oracle: tiny random Qwen3.5 text models (transformers 5.17 Qwen3_5ForCausalLM, fp32): the hybrid
decoder of Gated DeltaNet and gated-attention layers, and what it computes.

For each config NAME it writes OUT/NAME/ (save_pretrained: config.json, model.safetensors) and
OUT/cases_NAME.safetensors with, for three cases ("batch": two unpadded rows of 12 with labels;
"padded": the second row left-padded by 4; "long": one row of 70 tokens, crossing the DeltaNet's
64-token chunk):
  CASE.input_ids, CASE.attention_mask (padded only), CASE.labels, CASE.logits, CASE.loss,
  CASE.grad.NAME (the gradients of GRAD_NAMES after loss.backward()),
  CASE.generated (32 greedy tokens from generate with its caches, prompt included; not for
  "long"), grad_names (a newline-joined uint8 list of the NAMEs).
"""
import os
import shutil
import sys

import torch
from safetensors.torch import save_file
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

OUT = sys.argv[1]
VOCAB = 96
BASE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, max_position_embeddings=256,
            rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, pad_token_id=0, initializer_range=0.2)
CONFIGS = {
    # The published pattern (three DeltaNet layers, then full attention), quarter rotary (4 of 16
    # dims), GQA 4:2, 2:1 grouped DeltaNet heads with unequal key/value sizes, untied head.
    "hybrid": dict(num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                   linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
                   linear_value_head_dim=12, linear_conv_kernel_dim=4, tie_word_embeddings=False,
                   rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}),
    # Attention first and every other layer, half rotary (16 of 32), q/k/v/o biases, equal DeltaNet
    # heads, conv kernel 3, tied embeddings.
    "alternating": dict(num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4, head_dim=32,
                        layer_types=["full_attention", "linear_attention", "full_attention", "linear_attention"],
                        linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=16,
                        linear_value_head_dim=16, linear_conv_kernel_dim=3, attention_bias=True,
                        tie_word_embeddings=True,
                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}),
}
GRAD_NAMES = {
    "hybrid": ["model.embed_tokens.weight", "model.layers.0.linear_attn.in_proj_qkv.weight",
               "model.layers.0.linear_attn.conv1d.weight", "model.layers.1.linear_attn.A_log",
               "model.layers.1.linear_attn.dt_bias", "model.layers.2.linear_attn.norm.weight",
               "model.layers.3.self_attn.q_proj.weight", "model.layers.3.self_attn.q_norm.weight",
               "model.layers.3.input_layernorm.weight", "model.norm.weight", "lm_head.weight"],
    "alternating": ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.bias",
                    "model.layers.0.self_attn.k_norm.weight", "model.layers.1.linear_attn.in_proj_z.weight",
                    "model.layers.1.linear_attn.in_proj_b.weight", "model.layers.3.linear_attn.in_proj_a.weight",
                    "model.layers.3.linear_attn.out_proj.weight", "model.layers.2.mlp.up_proj.weight"],
}


def make_cases(model, name, gen):
    seq = 12
    ids = torch.randint(3, VOCAB, (2, seq), generator=gen)
    padded = torch.randint(3, VOCAB, (2, seq), generator=gen)
    mask = torch.ones(2, seq, dtype=torch.long)
    mask[1, :4] = 0  # row 1 left-padded by 4
    padded[1, :4] = 0
    long = torch.randint(3, VOCAB, (1, 70), generator=gen)
    cases = {"batch": (ids, None), "padded": (padded, mask), "long": (long, None)}
    out = {}
    for case, (input_ids, attention_mask) in cases.items():
        labels = input_ids.clone()
        labels[0, 3] = -100  # an ignored position
        if attention_mask is not None:
            labels[attention_mask == 0] = -100
        model.zero_grad()
        res = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        res.loss.backward()
        params = dict(model.named_parameters())
        out[f"{case}.input_ids"] = input_ids
        if attention_mask is not None:
            out[f"{case}.attention_mask"] = attention_mask
        out[f"{case}.labels"] = labels
        out[f"{case}.logits"] = res.logits.detach()
        out[f"{case}.loss"] = res.loss.detach().reshape(1)
        for pname in GRAD_NAMES[name]:
            # A tied head is the embedding: its gradient is the embedding's.
            out[f"{case}.grad.{pname}"] = params[pname].grad.detach().clone()
        if case == "long":
            continue
        with torch.no_grad():
            # No eos: all 32 tokens are compared whatever the random model emits.
            model.generation_config.eos_token_id = None
            generated = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=32,
                                       do_sample=False, pad_token_id=0)
        out[f"{case}.generated"] = generated
    out["grad_names"] = torch.tensor(list("\n".join(GRAD_NAMES[name]).encode()), dtype=torch.uint8)
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    for seed, (name, extra) in enumerate(CONFIGS.items()):
        torch.manual_seed(2000 + seed)
        model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**{**BASE, **extra})).float().eval()
        with torch.no_grad():
            # Zero-centred norms start at 0 and the gated norm at 1: random offsets show a misplaced
            # or mis-scaled norm; larger decay rates and biases make the DeltaNet state matter.
            for pname, p in model.named_parameters():
                if pname.endswith("norm.weight"):
                    p.add_(0.2 * torch.randn_like(p))
                if pname.endswith("dt_bias"):
                    p.copy_(0.5 * torch.randn_like(p))
        directory = os.path.join(OUT, name)
        shutil.rmtree(directory, ignore_errors=True)
        model.save_pretrained(directory)
        gen = torch.Generator().manual_seed(17 + seed)
        cases = make_cases(model, name, gen)
        save_file({k: v.contiguous() for k, v in cases.items()}, os.path.join(OUT, f"cases_{name}.safetensors"))
        print(name, model.config.layer_types)


if __name__ == "__main__":
    main()
