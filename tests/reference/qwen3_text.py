"""Oracle: tiny random Qwen3 and Qwen3-MoE causal LMs (transformers, fp32) and what they compute.

For each config NAME it writes OUT/NAME/ (save_pretrained: config.json, model.safetensors) and
OUT/cases_NAME.safetensors with, for two cases ("batch": two unpadded rows with labels; "padded":
a left-padded batch with attention_mask and labels):
  CASE.input_ids, CASE.attention_mask (padded only), CASE.labels, CASE.logits, CASE.loss,
  CASE.aux_loss and CASE.router_logits.L (MoE only; L counts the sparse layers in order),
  CASE.grad.NAME (the gradients of a few parameters after loss.backward(), under our names:
  the hub's per-expert names, expert slices of transformers' fused tensors),
  CASE.generated (16 greedy tokens from generate, prompt included), grad_names (a newline-joined
  uint8 list of the NAMEs).
For the MoE configs, OUT/NAME/saved_layout.txt says which expert layout save_pretrained wrote:
5.17 writes the published per-expert one (mlp.experts.N.{gate,up,down}_proj.weight), reverting
its fused in-memory gate_up_proj / down_proj through conversion_mapping's qwen2_moe rules, so
the one directory is both what save_pretrained writes and the hub layout.
"""
import json
import os
import shutil
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

OUT = sys.argv[1]
VOCAB = 96
BASE = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=3, max_position_embeddings=256,
            rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            bos_token_id=1, eos_token_id=2, pad_token_id=0, initializer_range=0.2)
CONFIGS = {
    # GQA (4 query heads over 2 key/value heads), head_dim = hidden / heads, untied lm_head.
    "dense_gqa": ("dense", dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                intermediate_size=96, tie_word_embeddings=False)),
    # head_dim 24 != 64 / 4, o_proj 96 -> 64, tied embeddings, q/k/v/o biases.
    "dense_headdim": ("dense", dict(num_attention_heads=4, num_key_value_heads=4, head_dim=24,
                                    intermediate_size=80, tie_word_embeddings=True, attention_bias=True)),
    # Four layers: layer 0 dense by mlp_only_layers, layer 2 dense by decoder_sparse_step 2 (layers
    # 1 and 3 sparse); renormalised top-2 of 6 experts.
    "moe_norm": ("moe", dict(num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                             intermediate_size=96, moe_intermediate_size=32, num_experts=6, num_experts_per_tok=2,
                             norm_topk_prob=True, decoder_sparse_step=2, mlp_only_layers=[0],
                             router_aux_loss_coef=0.02, tie_word_embeddings=False)),
    # Every layer sparse, top-3 of 5 experts without renormalisation, tied embeddings.
    "moe_plain": ("moe", dict(num_attention_heads=4, num_key_value_heads=1, head_dim=16, intermediate_size=96,
                              moe_intermediate_size=24, num_experts=5, num_experts_per_tok=3, norm_topk_prob=False,
                              router_aux_loss_coef=0.05, tie_word_embeddings=True)),
}
GRAD_NAMES = {
    "dense": ["model.embed_tokens.weight", "model.layers.0.self_attn.q_norm.weight",
              "model.layers.0.self_attn.k_proj.weight", "model.layers.1.mlp.down_proj.weight", "model.norm.weight"],
    "moe": ["model.embed_tokens.weight", "model.layers.0.self_attn.k_norm.weight",
            "model.layers.1.mlp.gate.weight", "model.layers.1.mlp.experts.0.down_proj.weight",
            "model.layers.1.mlp.experts.1.gate_proj.weight", "model.layers.1.mlp.experts.2.up_proj.weight"],
}


def param_grad(model, name):
    """The gradient of `name` (our per-expert name) in transformers' model, whatever its layout."""
    params = dict(model.named_parameters())
    if name in params:
        return params[name].grad
    # model.layers.L.mlp.experts.E.KIND_proj.weight -> a slice of the fused expert tensors.
    prefix, rest = name.split(".mlp.experts.")
    expert, kind = int(rest.split(".")[0]), rest.split(".")[1]
    if kind == "down_proj":
        return params[f"{prefix}.mlp.experts.down_proj"].grad[expert]
    gate_up = params[f"{prefix}.mlp.experts.gate_up_proj"].grad[expert]
    half = gate_up.shape[0] // 2
    return gate_up[:half] if kind == "gate_proj" else gate_up[half:]


def make_cases(model, kind, gen):
    seq = 12
    ids = torch.randint(3, VOCAB, (2, seq), generator=gen)
    padded = torch.randint(3, VOCAB, (2, seq), generator=gen)
    mask = torch.ones(2, seq, dtype=torch.long)
    mask[1, :4] = 0  # row 1 left-padded by 4
    padded[1, :4] = 0
    cases = {"batch": (ids, None), "padded": (padded, mask)}
    out = {}
    moe = kind == "moe"
    for case, (input_ids, attention_mask) in cases.items():
        labels = input_ids.clone()
        labels[0, 3] = -100  # an ignored position
        if attention_mask is not None:
            labels[attention_mask == 0] = -100
        model.zero_grad()
        kwargs = dict(output_router_logits=True) if moe else {}
        res = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, **kwargs)
        res.loss.backward()
        out[f"{case}.input_ids"] = input_ids
        if attention_mask is not None:
            out[f"{case}.attention_mask"] = attention_mask
        out[f"{case}.labels"] = labels
        out[f"{case}.logits"] = res.logits.detach()
        out[f"{case}.loss"] = res.loss.detach().reshape(1)
        if moe:
            out[f"{case}.aux_loss"] = res.aux_loss.detach().reshape(1)
            for i, logits in enumerate(res.router_logits):
                out[f"{case}.router_logits.{i}"] = logits.detach()
        for name in GRAD_NAMES[kind]:
            out[f"{case}.grad.{name}"] = param_grad(model, name).detach().clone()
        with torch.no_grad():
            # No eos: all 16 tokens are compared whatever the random model emits.
            model.generation_config.eos_token_id = None
            generated = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=16,
                                       do_sample=False, pad_token_id=0)
        out[f"{case}.generated"] = generated
    out["grad_names"] = torch.tensor(list("\n".join(GRAD_NAMES[kind]).encode()), dtype=torch.uint8)
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    for seed, (name, (kind, extra)) in enumerate(CONFIGS.items()):
        torch.manual_seed(1000 + seed)
        args = {**BASE, **extra}
        if kind == "dense":
            model = Qwen3ForCausalLM(Qwen3Config(**args)).float().eval()
        else:
            model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**args)).float().eval()
        with torch.no_grad():  # norms start at ones: random ones show a misplaced q/k norm
            for pname, p in model.named_parameters():
                if pname.endswith("norm.weight"):
                    p.add_(0.2 * torch.randn_like(p))
        directory = os.path.join(OUT, name)
        shutil.rmtree(directory, ignore_errors=True)
        model.save_pretrained(directory)
        if kind == "moe":
            saved = load_file(os.path.join(directory, "model.safetensors"))
            per_expert = any(".mlp.experts.0." in n for n in saved)
            with open(os.path.join(directory, "saved_layout.txt"), "w") as f:
                f.write("per_expert\n" if per_expert else "fused\n")
        gen = torch.Generator().manual_seed(7 + seed)
        cases = make_cases(model, kind, gen)
        save_file({k: v.contiguous() for k, v in cases.items()}, os.path.join(OUT, f"cases_{name}.safetensors"))
        print(name, kind, json.dumps(sorted(k for k in cases if k.startswith("batch.router_logits"))))


if __name__ == "__main__":
    main()
