"""Reference side of bench/bench_load.cpp: transformers loads the same real-shape Qwen2.5-VL
directory in the same dtype (from_pretrained, safetensors memory-mapped as transformers reads
them) and answers the same photo; the same JSON line, logits and answer ids.
Usage: bench_load.py MODEL_DIR IMAGE PROMPT THREADS fp32|bf16 NEW_TOKENS LOGITS_OUT
       bench_load.py compare OURS_FP32 OURS_BF16 THEIRS_FP32 THEIRS_BF16   (one JSON line)"""
import json, sys, time

import torch
from safetensors.torch import load_file, save_file

from bench_memory import peak_rss_mb, rss_now_mb




def compare(ours32, ours16, theirs32, theirs16):
    """bf16 fidelity: each implementation's bf16 logits against its own fp32 ones and against the
    other's fp32 ones (which agree within fp32 rounding), over every prompt position."""
    a32, a16, b32, b16 = (load_file(p) for p in (ours32, ours16, theirs32, theirs16))
    def err(x, y):
        d = (x["logits"] - y["logits"]).abs()
        return {"max": d.max().item(), "mean": d.mean().item(),
                "top1_agree": (x["logits"].argmax(-1) == y["logits"].argmax(-1)).float().mean().item()}
    def prefix(x, y):
        n = 0
        for p, q in zip(x["answer"].tolist(), y["answer"].tolist()):
            if p != q: break
            n += 1
        return n
    print(json.dumps({
        "fp32_mmtrain_vs_transformers": err(a32, b32),
        "bf16_error_mmtrain": err(a16, b32), "bf16_error_transformers": err(b16, b32),
        "bf16_mmtrain_vs_bf16_transformers": err(a16, b16),
        "answer_tokens": len(b32["answer"]),
        "same_answer_prefix": {"fp32": prefix(a32, b32), "bf16_mmtrain_vs_fp32": prefix(a16, b32),
                               "bf16_transformers_vs_fp32": prefix(b16, b32), "bf16_vs_bf16": prefix(a16, b16)}}))


def main():
    if sys.argv[1] == "compare":
        return compare(*sys.argv[2:6])
    from PIL import Image
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration
    model_dir, image, prompt, threads, dtype_name, new_tokens, out = sys.argv[1:8]
    torch.set_num_threads(int(threads))
    dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
    rss_before = rss_now_mb()
    start = time.perf_counter()
    processor = AutoProcessor.from_pretrained(model_dir)
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(model_dir, dtype=dtype).eval()
    load_s = time.perf_counter() - start
    rss_loaded, peak_loaded = rss_now_mb(), peak_rss_mb()
    messages = [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": prompt}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=[text], images=[Image.open(image)], return_tensors="pt")
    with torch.no_grad():
        logits = model(**inputs).logits[0].float()
        answer_start = time.perf_counter()
        out_ids = model.generate(**inputs, do_sample=False, max_new_tokens=int(new_tokens))
        answer_s = time.perf_counter() - answer_start
    answer = out_ids[0, inputs["input_ids"].shape[1]:].contiguous()
    save_file({"logits": logits.contiguous(), "answer": answer}, out)
    print(json.dumps({"impl": "transformers", "dtype": dtype_name, "load_s": load_s,
                      "rss_before_load_mb": rss_before, "rss_after_load_mb": rss_loaded,
                      "peak_rss_load_mb": peak_loaded, "answer_s": answer_s, "peak_rss_mb": peak_rss_mb(),
                      "prompt_tokens": inputs["input_ids"].shape[1], "new_tokens": len(answer)}))


main()
