"""Reference side of the training-step benchmark: a plain PyTorch loop over transformers'
Qwen2.5-VL, Qwen3-VL, Qwen3-VL-MoE or Qwen3.5 (the model directory's model_type picks the class; the MoE
model's forward adds its load-balancing loss, output_router_logits=True, as mmtrain's step does; forward, token cross-entropy, backward, clip_grad_norm_, fused AdamW as the HF
Trainer's default adamw_torch_fused) with the same shapes as bench/bench_train.cpp.
Usage: bench_train.py MODEL_DIR THREADS STEPS BATCH -> one JSON line. Under torchrun every rank
trains BATCH samples of its own per step with torch's FSDP2 (fully_shard on each ViT block and
decoder layer, then the root, over Gloo), as the mmtrain side shards; rank 0 prints tokens/s over
all ranks."""
import json, os, resource, statistics, sys, time

import torch
import torch.nn.functional as F
from transformers import (Qwen2_5_VLForConditionalGeneration, Qwen3_5ForConditionalGeneration,
                          Qwen3VLForConditionalGeneration, Qwen3VLMoeForConditionalGeneration)


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


model_dir, threads, steps, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
rss_before_model = peak_rss_mb()
with open(os.path.join(model_dir, "config.json")) as f:
    model_type = json.load(f)["model_type"]
model_class = {"qwen2_5_vl": Qwen2_5_VLForConditionalGeneration, "qwen3_vl": Qwen3VLForConditionalGeneration,
               "qwen3_vl_moe": Qwen3VLMoeForConditionalGeneration, "qwen3_5": Qwen3_5ForConditionalGeneration}[model_type]
moe = model_type == "qwen3_vl_moe"
model = model_class.from_pretrained(model_dir, dtype=torch.float32)
model.train()
cfg = model.config
world = int(os.environ.get("WORLD_SIZE", "1"))
rank = int(os.environ.get("RANK", "0"))
if world > 1:
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    dist.init_process_group("gloo")
    for block in list(model.model.visual.blocks) + list(model.model.language_model.layers):
        fully_shard(block)
    fully_shard(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01, fused=True)
torch.manual_seed(rank)

samples = []
for k in range(rank * batch, (rank + 1) * batch):
    ids = [1]
    text = lambda n: [100 + (k * 31 + i * 7) % 200 for i in range(n)]
    ids += text(20 + k % 7)
    ids += [cfg.vision_start_token_id] + [cfg.image_token_id] * 64 + [cfg.vision_end_token_id]
    ids += text(30 + k % 5)
    prompt = len(ids)
    ids += text(12 + k % 3)
    targets = [-100] * len(ids)
    for p in range(prompt - 1, len(ids) - 1):
        targets[p] = ids[p + 1]
    samples.append((ids, targets, torch.randn(256, 3 * 2 * cfg.vision_config.patch_size ** 2)))
width = max(len(s[0]) for s in samples)
input_ids = torch.zeros(batch, width, dtype=torch.long)
mask = torch.zeros(batch, width, dtype=torch.long)
targets = torch.full((batch, width), -100, dtype=torch.long)
for r, (ids, tg, _) in enumerate(samples):
    input_ids[r, :len(ids)] = torch.tensor(ids)
    mask[r, :len(ids)] = 1
    targets[r, :len(ids)] = torch.tensor(tg)
inputs = dict(input_ids=input_ids, attention_mask=mask, pixel_values=torch.cat([s[2] for s in samples]),
              image_grid_thw=torch.tensor([[1, 16, 16]] * batch),
              mm_token_type_ids=(input_ids == cfg.image_token_id).int())
count = int((targets != -100).sum())
tokens = int(mask.sum())
if world > 1:  # the loss is divided by the target count of all ranks, as mmtrain does
    totals = torch.tensor([count, tokens], dtype=torch.float64)
    dist.all_reduce(totals)
    count, tokens = int(totals[0]), int(totals[1])


def step():
    output = model(**inputs, **(dict(output_router_logits=True) if moe else {}))
    logits = output.logits
    loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-100,
                           reduction="sum")
    loss = loss / count
    if moe:  # one micro-batch per step: the aux term enters at its full weight
        loss = loss + cfg.text_config.router_aux_loss_coef * output.aux_loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()


step()
times = []
for _ in range(steps):
    if world > 1:
        dist.barrier()
    start = time.perf_counter()
    step()
    times.append(time.perf_counter() - start)
median = statistics.median(times)
if rank != 0:
    sys.exit(0)
print(json.dumps({"impl": "transformers", "processes": world, "tokens_per_step": tokens, "step_ms": median * 1e3,
                  "tokens_per_s": tokens / median, "peak_rss_mb": peak_rss_mb(),
                  "training_rss_mb": peak_rss_mb() - rss_before_model}))
