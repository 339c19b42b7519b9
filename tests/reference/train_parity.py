"""Oracle: 5 optimizer steps of a plain PyTorch training loop over transformers' Qwen2.5-VL,
Qwen2-VL, Qwen3-VL, Qwen3-VL-MoE, Qwen3.5 and Qwen3.5-MoE (the same data and settings; each family's
own vision tower, for Qwen3-VL its Qwen3 decoder with DeepStack, for Qwen3-VL-MoE its sparse layers
with the load-balancing loss, for Qwen3.5 its hybrid decoder of a Gated DeltaNet and a
gated-attention layer, for Qwen3.5-MoE the same with sparse layers and shared experts).

What transformers' Trainer does for a step, written out: AdamW (torch.optim, fp32) with the
Trainer's decay / no-decay parameter split, a cosine schedule with warmup, gradient
accumulation over 2 micro-batches whose summed token cross-entropy is divided by the step's
target count (Trainer's num_items_in_batch), and global-norm clipping. The MoE model's forward is
asked for the router logits (output_router_logits=True, the switch that adds the load-balancing
loss), so each micro-batch adds router_aux_loss_coef * aux_loss, averaged over the step's
micro-batches as Trainer averages each micro-batch's loss over the accumulation steps.

Qwen3.5 with its multi-token-prediction head (qwen3_5_mtp: 1 depth, as published; qwen3_5_moe_mtp:
2 depths with sparse layers): transformers has no module for the head (it drops mtp.* on load), so
it is assembled here from transformers' own Qwen3.5 decoder layer and RMSNorm, wired as vLLM's
Qwen3_5MultiTokenPredictor (the serving side of these checkpoints): depth k normalises the
embedding of token i + k and the previous depth's hidden state (depth 1: the decoder's final,
normed one), projects their concatenation [embedding, hidden] with fc, runs one full-attention
layer over the decoder's own positions and mask, and norms; the lm_head predicts token i + k + 1.
Where token i + k is not in the row (past its end, padding) the embedding read is zero.
Its loss is Megatron's: mtp_loss_weight / depths times the summed cross-entropy of the depths, over
the step's target count; the head's MoE routers join the load-balancing loss (as every Megatron MoE
layer adds its own), computed with transformers' load_balancing_loss_func over all routers.

Writes into <out> for Qwen2.5-VL, and the same into <out>/qwen2_vl, <out>/qwen3_vl,
<out>/qwen3_vl_moe, <out>/qwen3_5, <out>/qwen3_5_moe, <out>/qwen3_5_mtp and <out>/qwen3_5_moe_mtp:
  model/               the initial weights (save_pretrained) and config
  samples.safetensors  per sample k: k.input_ids [len], k.targets [len] (already shifted, -100 =
                       ignored), k.pixel_values, k.image_grid_thw
  steps.json           {"micro_batches": [[[sample ids of micro-batch 0], [..1]] per step],
                        "lr", "weight_decay", "betas", "eps", "max_grad_norm", "warmup", "total",
                        "mtp_loss_weight" (0 without a head)}
  result.safetensors   losses [5], grad_norms [5] (before clipping), lrs [5]
  final/               the weights after 5 steps (save_pretrained)
"""
import copy, json, os, sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers import (Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2VLConfig,
                          Qwen2VLForConditionalGeneration, Qwen3_5Config, Qwen3_5ForConditionalGeneration,
                          Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration,
                          Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLMoeConfig,
                          Qwen3VLMoeForConditionalGeneration, Trainer)
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5DecoderLayer, Qwen3_5RMSNorm
from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import (Qwen3_5MoeDecoderLayer, Qwen3_5MoeRMSNorm,
                                                                  load_balancing_loss_func)
from transformers.optimization import get_cosine_schedule_with_warmup

torch.set_num_threads(1)
IMAGE, VIDEO, VSTART, VEND = 290, 291, 292, 293
TEXT_CONFIG = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, rms_norm_eps=1e-6, initializer_range=0.05, bos_token_id=1,
                     eos_token_id=2, rope_parameters=dict(rope_type="default", rope_theta=10000.0,
                                                          mrope_section=[2, 3, 3]))
# Qwen3-VL: 16-pixel patches, a position table smaller than some grids, DeepStack into both
# decoder layers, a head_dim of its own and interleaved M-RoPE.
QWEN3_TEXT_CONFIG = dict(TEXT_CONFIG, head_dim=24, rope_parameters=dict(rope_type="default", rope_theta=10000.0,
                                                                       mrope_section=[4, 4, 4], mrope_interleaved=True))
# Qwen3-VL-MoE: 4 experts, top 2, both layers sparse, and a load-balancing weight large enough
# that a wrong aux gradient moves the weights far past the tolerance (the published 0.001 would not).
QWEN3_MOE_TEXT_CONFIG = dict(QWEN3_TEXT_CONFIG, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=40,
                             router_aux_loss_coef=0.3)
QWEN3_VL_VISION = dict(depth=3, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64, patch_size=16,
                       num_position_embeddings=16, deepstack_visual_indexes=[0, 2], initializer_range=0.05)
# Qwen3.5: a Gated DeltaNet layer (2:1 grouped heads, key 8 / value 12 per head) then a gated-attention
# layer with quarter rotary (8 of head_dim 32: mrope_section [2, 1, 1]); Qwen3-VL's tower without DeepStack.
QWEN3_5_TEXT_CONFIG = dict(TEXT_CONFIG, head_dim=32, layer_types=["linear_attention", "full_attention"],
                           linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
                           linear_value_head_dim=12, linear_conv_kernel_dim=4,
                           rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 1, 1],
                                                mrope_interleaved=True, partial_rotary_factor=0.25))
QWEN3_5_VISION = {k: v for k, v in QWEN3_VL_VISION.items() if k != "deepstack_visual_indexes"}
# Qwen3.5-MoE: both layers sparse (4 experts of 40, top 2) beside a gated shared expert of 48, with a
# load-balancing weight that matters at this size, as for Qwen3-VL-MoE.
QWEN3_5_MOE_TEXT_CONFIG = dict(QWEN3_5_TEXT_CONFIG, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=40,
                               shared_expert_intermediate_size=48, router_aux_loss_coef=0.3)
FAMILIES = {
    "qwen2_5_vl": (Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration,
                   dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64, patch_size=14,
                        window_size=56, fullatt_block_indexes=[1], tokens_per_second=4, initializer_range=0.05),
                   TEXT_CONFIG),
    "qwen2_vl": (Qwen2VLConfig, Qwen2VLForConditionalGeneration,
                 dict(depth=2, embed_dim=32, hidden_size=64, mlp_ratio=2, num_heads=2, patch_size=14,
                      initializer_range=0.05),
                 TEXT_CONFIG),
    "qwen3_vl": (Qwen3VLConfig, Qwen3VLForConditionalGeneration, QWEN3_VL_VISION, QWEN3_TEXT_CONFIG),
    "qwen3_vl_moe": (Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration, QWEN3_VL_VISION, QWEN3_MOE_TEXT_CONFIG),
    "qwen3_5": (Qwen3_5Config, Qwen3_5ForConditionalGeneration, QWEN3_5_VISION, QWEN3_5_TEXT_CONFIG),
    "qwen3_5_moe": (Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration, QWEN3_5_VISION, QWEN3_5_MOE_TEXT_CONFIG),
}

# family -> (the family it extends, depths of its multi-token-prediction head)
MTP_FAMILIES = {"qwen3_5_mtp": ("qwen3_5", 1), "qwen3_5_moe_mtp": ("qwen3_5_moe", 2)}
# Larger than Megatron's default 0.1, so that a wrong head moves the weights past the tolerance.
MTP_LOSS_WEIGHT = 0.5


class MultiTokenPrediction(torch.nn.Module):
    """The mtp.* head (see the module docstring), of transformers' Qwen3.5 layers."""

    def __init__(self, text_config, depths):
        super().__init__()
        sparse = getattr(text_config, "num_experts", 0) > 0
        layer_class, norm_class = ((Qwen3_5MoeDecoderLayer, Qwen3_5MoeRMSNorm) if sparse
                                   else (Qwen3_5DecoderLayer, Qwen3_5RMSNorm))
        config = copy.deepcopy(text_config)
        config.layer_types = ["full_attention"] * depths
        config.num_hidden_layers = depths
        h, eps = config.hidden_size, config.rms_norm_eps
        self.fc = torch.nn.Linear(2 * h, h, bias=False)
        self.layers = torch.nn.ModuleList(layer_class(config, i) for i in range(depths))
        self.norm = norm_class(h, eps=eps)
        self.pre_fc_norm_hidden = norm_class(h, eps=eps)
        self.pre_fc_norm_embedding = norm_class(h, eps=eps)


class DecoderTaps:
    """What one forward of the transformers model gives the head: the text model's input embeddings
    (vision features spliced in) and final hidden state, and the full-attention layer's rotary
    tables, mask and positions."""

    def __init__(self, model):
        text = model.model.language_model
        text.register_forward_pre_hook(self.take_inputs, with_kwargs=True)
        text.register_forward_hook(self.take_output)
        full = text.config.layer_types.index("full_attention")
        text.layers[full].register_forward_pre_hook(self.take_layer_kwargs, with_kwargs=True)

    def take_inputs(self, module, args, kwargs):
        self.inputs_embeds = kwargs["inputs_embeds"]

    def take_output(self, module, args, output):
        self.hidden = output.last_hidden_state

    def take_layer_kwargs(self, module, args, kwargs):
        self.layer_kwargs = {k: kwargs[k] for k in ("position_embeddings", "attention_mask", "position_ids")}


def mtp_loss_sum(model, mtp, taps, targets, attention_mask):
    """Summed over the depths: cross-entropy of depth k's prediction of token i + k + 1 (targets
    shifted left by k; nothing past a row's end or at padding), times weight / depths. Where token
    i + k is not there the depth reads a zero embedding: such positions predict nothing, but the
    head's routers see them, so the load-balancing loss depends on what they read."""
    depths = len(mtp.layers)
    embeds, h = taps.inputs_embeds, taps.hidden
    total = 0
    for k in range(1, depths + 1):
        # Token p + k's embedding where p and p + k are real tokens, else zeros (past the end, padding).
        ahead = torch.cat([attention_mask[:, k:], torch.zeros_like(attention_mask[:, :k])], 1) * attention_mask
        nxt = torch.cat([embeds[:, k:], torch.zeros_like(embeds[:, :k])], 1) * ahead.unsqueeze(-1).to(embeds.dtype)
        x = mtp.fc(torch.cat([mtp.pre_fc_norm_embedding(nxt), mtp.pre_fc_norm_hidden(h)], -1))
        h = mtp.norm(mtp.layers[k - 1](x, **taps.layer_kwargs))
        t = torch.cat([targets[:, k:], torch.full_like(targets[:, :k], -100)], 1).masked_fill(attention_mask == 0, -100)
        logits = model.lm_head(h)
        total = total + F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), t.reshape(-1), ignore_index=-100,
                                        reduction="sum")
    return total * (MTP_LOSS_WEIGHT / depths)


def with_mtp_tensors(path, mtp):
    """Adds the head's tensors (mtp.*) to the model.safetensors save_pretrained wrote in `path`."""
    file = os.path.join(path, "model.safetensors")
    tensors = load_file(file)
    tensors.update({"mtp." + n: p.detach().contiguous() for n, p in mtp.state_dict().items()})
    save_file(tensors, file, metadata={"format": "pt"})


def run(family, out):
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(7)
    base, depths = MTP_FAMILIES.get(family, (family, 0))
    config_class, model_class, vision_config, text_config = FAMILIES[base]
    if depths:
        text_config = dict(text_config, mtp_num_hidden_layers=depths)
    cfg = config_class(vision_config=vision_config, text_config=text_config, image_token_id=IMAGE,
                       video_token_id=VIDEO, vision_start_token_id=VSTART, vision_end_token_id=VEND,
                       tie_word_embeddings=False)
    model = model_class(cfg)
    mtp = None
    if depths:
        mtp = MultiTokenPrediction(model.config.text_config, depths)
        mtp.apply(model.model.language_model._init_weights)  # its config has the text initializer_range
    model.save_pretrained(os.path.join(out, "model"))
    if mtp is not None:
        with_mtp_tensors(os.path.join(out, "model"), mtp)
    gen = torch.Generator().manual_seed(11)
    row = 3 * 2 * vision_config["patch_size"] ** 2
    samples = [sample(gen, 2 + k % 5, GRIDS[k % 4], 3 + k % 3, 2 + k % 4, row) for k in range(20)]
    train(model, samples, out, aux_loss_coef=text_config.get("router_aux_loss_coef"), mtp=mtp)


def sample(gen, text_before, grid, text_after, answer, row):
    """<bos> text <vs> pads <ve> text | answer: only the answer tokens are targets."""
    n = grid[0] * grid[1] * grid[2] // 4
    rand = lambda k: torch.randint(3, 280, (k,), generator=gen).tolist()
    prompt = [1] + rand(text_before) + [VSTART] + [IMAGE] * n + [VEND] + rand(text_after)
    ids = prompt + rand(answer) + [2]
    targets = [-100] * len(ids)
    for p in range(len(prompt) - 1, len(ids) - 1):  # position p predicts token p + 1
        targets[p] = ids[p + 1]
    pixels = torch.randn(grid[0] * grid[1] * grid[2], row, generator=gen)
    return {"input_ids": torch.tensor(ids), "targets": torch.tensor(targets), "pixel_values": pixels,
            "image_grid_thw": torch.tensor([grid])}


GRIDS = [(1, 4, 4), (1, 6, 4), (1, 4, 8), (1, 2, 2)]
micro_batches = [[[4 * s, 4 * s + 1], [4 * s + 2, 4 * s + 3]] for s in range(5)]
settings = dict(lr=5e-4, weight_decay=0.1, betas=[0.9, 0.95], eps=1e-8, max_grad_norm=1.0, warmup=2, total=5)


def collate(samples, ids):
    """Right-padded micro-batch, as the C++ collate_padded builds it."""
    group = [samples[i] for i in ids]
    width = max(len(s["input_ids"]) for s in group)
    input_ids = torch.zeros(len(group), width, dtype=torch.long)
    mask = torch.zeros(len(group), width, dtype=torch.long)
    targets = torch.full((len(group), width), -100, dtype=torch.long)
    for r, s in enumerate(group):
        n = len(s["input_ids"])
        input_ids[r, :n] = s["input_ids"]
        mask[r, :n] = 1
        targets[r, :n] = s["targets"]
    return dict(input_ids=input_ids, attention_mask=mask, targets=targets,
                pixel_values=torch.cat([s["pixel_values"] for s in group]),
                image_grid_thw=torch.cat([s["image_grid_thw"] for s in group]),
                mm_token_type_ids=(input_ids == IMAGE).int())


def train(model, samples, out, aux_loss_coef=None, mtp=None):
    decay = set(Trainer.get_decay_parameter_names(None, model))
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if mtp is not None:
        decay |= {"mtp." + n for n in Trainer.get_decay_parameter_names(None, mtp)}
        params += [("mtp." + n, p) for n, p in mtp.named_parameters()]
        taps = DecoderTaps(model)
        mtp_routers = []  # this forward's router logits of the head's sparse layers
        for layer in mtp.layers:
            if hasattr(layer.mlp, "gate"):
                layer.mlp.gate.register_forward_hook(lambda module, args, output: mtp_routers.append(output[0]))
        mtp.train()
    groups = [{"params": [p for n, p in params if n in decay], "weight_decay": settings["weight_decay"]},
              {"params": [p for n, p in params if n not in decay], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=settings["lr"], betas=tuple(settings["betas"]), eps=settings["eps"],
                                  foreach=False)
    scheduler = get_cosine_schedule_with_warmup(optimizer, settings["warmup"], settings["total"])

    model.train()
    losses, norms, lrs = [], [], []
    for step in micro_batches:
        batches = [collate(samples, ids) for ids in step]
        count = sum(int((b["targets"] != -100).sum()) for b in batches)
        total = 0.0
        lrs.append(scheduler.get_last_lr()[0])
        for b in batches:
            kwargs = dict(output_router_logits=True) if aux_loss_coef is not None else {}
            if mtp is not None:
                mtp_routers.clear()
            output = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], pixel_values=b["pixel_values"],
                           image_grid_thw=b["image_grid_thw"], mm_token_type_ids=b["mm_token_type_ids"], **kwargs)
            logits = output.logits
            loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), b["targets"].reshape(-1),
                                   ignore_index=-100, reduction="sum")
            if mtp is not None:
                loss = loss + mtp_loss_sum(model, mtp, taps, b["targets"], b["attention_mask"])
            step_loss = loss / count
            if aux_loss_coef is not None:
                aux_loss = output.aux_loss
                if mtp is not None:
                    text = model.config.text_config
                    assert len(output.router_logits) == text.num_hidden_layers and len(mtp_routers) == len(mtp.layers)
                    aux_loss = load_balancing_loss_func(tuple(output.router_logits) + tuple(mtp_routers),
                                                        text.num_experts, text.num_experts_per_tok,
                                                        b["attention_mask"])
                step_loss = step_loss + aux_loss_coef * aux_loss / len(batches)
                total += aux_loss_coef * aux_loss.item() * count / len(batches)
            step_loss.backward()
            total += loss.item()
        losses.append(total / count)
        norms.append(float(torch.nn.utils.clip_grad_norm_([p for _, p in params], settings["max_grad_norm"])))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()

    tensors = {}
    for k, s in enumerate(samples):
        for field, t in s.items():
            tensors[f"{k}.{field}"] = t.contiguous()
    save_file(tensors, os.path.join(out, "samples.safetensors"))
    with open(os.path.join(out, "steps.json"), "w") as f:
        json.dump(dict(micro_batches=micro_batches, mtp_loss_weight=MTP_LOSS_WEIGHT if mtp is not None else 0,
                       **settings), f)
    save_file({"losses": torch.tensor(losses, dtype=torch.float64), "grad_norms": torch.tensor(norms, dtype=torch.float64),
               "lrs": torch.tensor(lrs, dtype=torch.float64)}, os.path.join(out, "result.safetensors"))
    model.save_pretrained(os.path.join(out, "final"))
    if mtp is not None:
        with_mtp_tensors(os.path.join(out, "final"), mtp)
    print("losses", losses)
    print("grad norms", norms)


run("qwen2_5_vl", sys.argv[1])
run("qwen2_vl", os.path.join(sys.argv[1], "qwen2_vl"))
run("qwen3_vl", os.path.join(sys.argv[1], "qwen3_vl"))
run("qwen3_vl_moe", os.path.join(sys.argv[1], "qwen3_vl_moe"))
run("qwen3_5", os.path.join(sys.argv[1], "qwen3_5"))
run("qwen3_5_moe", os.path.join(sys.argv[1], "qwen3_5_moe"))
run("qwen3_5_mtp", os.path.join(sys.argv[1], "qwen3_5_mtp"))
run("qwen3_5_moe_mtp", os.path.join(sys.argv[1], "qwen3_5_moe_mtp"))
