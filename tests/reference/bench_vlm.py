"""Reference side of the Qwen-VL latency benchmark: transformers' processor + generate on the
same model directory, image, prompt and thread count as bench/bench_vlm.cpp (the directory's
model_type picks the class: Qwen2.5-VL, or Qwen3.5 with its KV and DeltaNet caches).
Usage: bench_vlm.py MODEL_DIR IMAGE PROMPT THREADS NEW_TOKENS REPEATS -> one JSON line."""
import json, os, statistics, sys, time

import torch
from PIL import Image
from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration, Qwen3_5ForConditionalGeneration

model_dir, image, prompt = sys.argv[1:4]
threads, new_tokens, repeats = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
torch.set_num_threads(threads)
processor = AutoProcessor.from_pretrained(model_dir)
with open(os.path.join(model_dir, "config.json")) as f:
    model_type = json.load(f)["model_type"]
model_class = {"qwen2_5_vl": Qwen2_5_VLForConditionalGeneration, "qwen3_5": Qwen3_5ForConditionalGeneration}[model_type]
model = model_class.from_pretrained(model_dir, dtype=torch.float32).eval()
messages = [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": prompt}]}]
text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
inputs = processor(text=[text], images=[Image.open(image)], return_tensors="pt")


def timed(n):
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(**inputs, do_sample=False, max_new_tokens=n)
    return time.perf_counter() - start, out.shape[1] - inputs["input_ids"].shape[1]


timed(new_tokens)
prefill, full = [], []
for _ in range(repeats):
    prefill.append(timed(1)[0])
    t, produced = timed(new_tokens)
    full.append(t)
p, f = statistics.median(prefill), statistics.median(full)
print(json.dumps({"impl": "transformers", "prompt_tokens": inputs["input_ids"].shape[1], "new_tokens": produced,
                  "prefill_ms": p * 1e3, "decode_ms_per_token": (f - p) * 1e3 / max(produced - 1, 1),
                  "total_ms": f * 1e3}))
