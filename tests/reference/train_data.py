"""Oracle: what a transformers fine-tuning script feeds Qwen2.5-VL for whole conversations.

Builds a small Hugging Face model directory (the tokenizer the tokenizer oracle trained, the
official chat template, Qwen2-VL image/video processors with small pixel budgets, a tiny
Qwen2.5-VL config), media files, and for several conversations records what
Qwen2_5_VLProcessor(apply_chat_template(messages, add_generation_prompt=False)) gives (input ids,
pixel values, grids, second_per_grid_ts) and the M-RoPE positions of model.model.get_rope_index.
The same conversations are also written as dataset records in the three layouts users keep
(LLaVA, ShareGPT/LLaMA-Factory, OpenAI content parts) with paths relative to OUT_DIR.

Usage: train_data.py OUT_DIR [TOKENIZER_DIR]   (default: OUT_DIR/../tokenizer_corpus)
Writes: model/, media/, llava.jsonl, sharegpt.json, openai.jsonl, cases.json, tensors.safetensors
"""
import json, os, shutil, subprocess, sys

import numpy as np
import torch
from PIL import Image, ImageDraw
from safetensors.torch import save_file
from transformers import (AutoTokenizer, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration,
                          Qwen2_5_VLProcessor, Qwen2VLImageProcessor, Qwen2VLVideoProcessor)
from transformers.video_utils import VideoMetadata

from qwen2_vl_chat_template import QWEN2_VL_CHAT_TEMPLATE

out = os.path.abspath(sys.argv[1])
tok_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(out), "tokenizer_corpus")
model_dir, media = os.path.join(out, "model"), os.path.join(out, "media")
shutil.rmtree(out, ignore_errors=True)
os.makedirs(model_dir)
os.makedirs(media)
torch.manual_seed(0)

tokenizer = AutoTokenizer.from_pretrained(tok_dir)
processor = Qwen2_5_VLProcessor(image_processor=Qwen2VLImageProcessor(min_pixels=28 * 28 * 4, max_pixels=28 * 28 * 20),
                                video_processor=Qwen2VLVideoProcessor(min_pixels=28 * 28 * 2, max_pixels=28 * 28 * 8),
                                tokenizer=tokenizer, chat_template=QWEN2_VL_CHAT_TEMPLATE)
processor.save_pretrained(model_dir)
ids = tokenizer.convert_tokens_to_ids
config = Qwen2_5_VLConfig(
    text_config=dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
                     eos_token_id=ids("<|im_end|>"), bos_token_id=ids("<|endoftext|>")),
    vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32,
                       patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=56,
                       fullatt_block_indexes=[0], tokens_per_second=2),
    image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
    vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"))
config.save_pretrained(model_dir)
model = Qwen2_5_VLForConditionalGeneration(config).eval()


def shapes_image(w, h, seed):
    rng = np.random.default_rng(seed)
    img = Image.new("RGB", (w, h), tuple(int(c) for c in rng.integers(0, 255, 3)))
    d = ImageDraw.Draw(img)
    for _ in range(4):
        x0, y0 = int(rng.integers(0, w - 8)), int(rng.integers(0, h - 8))
        d.ellipse([x0, y0, x0 + int(rng.integers(6, w // 2)), y0 + int(rng.integers(6, h // 2))],
                  fill=tuple(int(c) for c in rng.integers(0, 255, 3)))
    return img


shapes_image(120, 80, 1).save(os.path.join(media, "shapes.png"))
shapes_image(67, 93, 2).save(os.path.join(media, "tall.jpg"), quality=90)
# 12 frames at 6 fps, stored losslessly so both sides see the same pixels.
frames = np.zeros((12, 62, 90, 3), np.uint8)
frames[..., 0] = np.linspace(0, 255, 90, dtype=np.uint8)[None, None, :]
frames[..., 2] = np.linspace(255, 0, 62, dtype=np.uint8)[None, :, None]
for t in range(12):
    frames[t, 20:40, 5 + 6 * t:25 + 6 * t] = (255, 255, 0)
subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", "90x62",
                "-r", "6", "-i", "-", "-c:v", "ffv1", "-pix_fmt", "bgr0", os.path.join(media, "moving.mkv")],
               input=frames.tobytes(), check=True)
VIDEO_FPS = 2.0

PNG, JPG, MKV = "media/shapes.png", "media/tall.jpg", "media/moving.mkv"
I = lambda p: {"type": "image", "image": p}
V = lambda p: {"type": "video", "video": p}
T = lambda s: {"type": "text", "text": s}

# Each case: the messages (paths relative to OUT_DIR) and the same conversation as a LLaVA and a
# ShareGPT record (the OpenAI record is the messages themselves).
CASES = [
    dict(name="one_image", type="caption",
         messages=[{"role": "user", "content": [I(PNG), T("What is in the picture?")]},
                   {"role": "assistant", "content": "Some coloured circles."}],
         llava={"image": PNG, "conversations": [{"from": "human", "value": "<image>What is in the picture?"},
                                                {"from": "gpt", "value": "Some coloured circles."}]},
         sharegpt={"messages": [{"role": "user", "content": "<image>What is in the picture?"},
                                {"role": "assistant", "content": "Some coloured circles."}], "images": [PNG]}),
    dict(name="untagged_multi_turn", type="compare",
         messages=[{"role": "system", "content": "You describe images."},
                   {"role": "user", "content": [I(PNG), I(JPG), T("Compare them.")]},
                   {"role": "assistant", "content": "The first is wide, the second tall."},
                   {"role": "user", "content": "And the colours?"},
                   {"role": "assistant", "content": "Different.\nVery different!"}],
         llava={"image": [PNG, JPG], "conversations": [
             {"from": "system", "value": "You describe images."},
             {"from": "human", "value": "Compare them."},
             {"from": "gpt", "value": "The first is wide, the second tall."},
             {"from": "human", "value": "And the colours?"},
             {"from": "gpt", "value": "Different.\nVery different!"}]},
         sharegpt={"system": "You describe images.", "images": [PNG, JPG], "conversations": [
             {"from": "human", "value": "Compare them."},
             {"from": "gpt", "value": "The first is wide, the second tall."},
             {"from": "human", "value": "And the colours?"},
             {"from": "gpt", "value": "Different.\nVery different!"}]}),
    dict(name="image_and_video", type="video",
         messages=[{"role": "user", "content": [T("First this:"), I(JPG), T("then this:"), V(MKV)]},
                   {"role": "assistant", "content": "A square."},
                   {"role": "user", "content": "Which colour is it?"},
                   {"role": "assistant", "content": "Yellow, moving right."}],
         llava={"image": JPG, "video": MKV, "conversations": [
             {"from": "human", "value": "First this:<image>then this:<video>"},
             {"from": "gpt", "value": "A square."},
             {"from": "human", "value": "Which colour is it?"},
             {"from": "gpt", "value": "Yellow, moving right."}]},
         sharegpt={"images": [JPG], "videos": [MKV], "messages": [
             {"role": "user", "content": "First this:<image>then this:<video>"},
             {"role": "assistant", "content": "A square."},
             {"role": "user", "content": "Which colour is it?"},
             {"role": "assistant", "content": "Yellow, moving right."}]}),
    dict(name="text_only", type="chat",
         messages=[{"role": "user", "content": "Say something about the weather."},
                   {"role": "assistant", "content": "今天天气很好 — nice day 😀"}],
         llava={"conversations": [{"from": "human", "value": "Say something about the weather."},
                                  {"from": "gpt", "value": "今天天气很好 — nice day 😀"}]},
         sharegpt={"messages": [{"role": "user", "content": "Say something about the weather."},
                                {"role": "assistant", "content": "今天天气很好 — nice day 😀"}]}),
]


def absolute(messages):
    def fix(part):
        part = dict(part)
        for k in ("image", "video"):
            if k in part:
                part[k] = os.path.join(out, part[k])
        return part
    return [{**m, "content": [fix(p) for p in m["content"]] if isinstance(m["content"], list) else m["content"]}
            for m in messages]


results, tensors = {}, {}
for case in CASES:
    name, messages = case["name"], absolute(case["messages"])
    prompt = processor.apply_chat_template(messages, add_generation_prompt=False, tokenize=False)
    parts = [p for m in messages if isinstance(m["content"], list) for p in m["content"]]
    images = [Image.open(p["image"]) for p in parts if p["type"] == "image"]
    n_videos = sum(p["type"] == "video" for p in parts)
    kwargs = {}
    if n_videos:
        kwargs = dict(videos=[frames] * n_videos, do_sample_frames=True, fps=VIDEO_FPS,
                      video_metadata=[VideoMetadata(total_num_frames=12, fps=6.0, duration=2.0)] * n_videos)
    inputs = processor(text=[prompt], images=images or None, return_tensors="pt", **kwargs)
    input_ids = inputs["input_ids"]
    mm_types = (input_ids == config.image_token_id).int() + 2 * (input_ids == config.video_token_id).int()
    sec = inputs.get("second_per_grid_ts")
    with torch.no_grad():
        position_ids, _ = model.model.get_rope_index(
            input_ids, mm_types, image_grid_thw=inputs.get("image_grid_thw"),
            video_grid_thw=inputs.get("video_grid_thw"),
            second_per_grid_ts=torch.as_tensor(sec) if sec is not None else None,
            attention_mask=torch.ones_like(input_ids))
    results[name] = {
        "prompt": prompt, "input_ids": input_ids[0].tolist(), "type": case["type"],
        "assistant": [m["content"] for m in messages if m["role"] == "assistant"],
        "second_per_grid_ts": [float(x) for x in (sec if sec is not None else [])],
    }
    tensors[f"{name}.position_ids"] = position_ids[:, 0].contiguous()
    for key in ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw"):
        if key in inputs:
            tensors[f"{name}.{key}"] = inputs[key].contiguous()

with open(os.path.join(out, "llava.jsonl"), "w") as f:
    for c in CASES:
        f.write(json.dumps({**c["llava"], "type": c["type"]}, ensure_ascii=False) + "\n\n")  # blank lines are ignored
with open(os.path.join(out, "sharegpt.json"), "w") as f:
    json.dump([{**c["sharegpt"], "type": c["type"]} for c in CASES], f, ensure_ascii=False, indent=1)
with open(os.path.join(out, "openai.jsonl"), "w") as f:
    for c in CASES:
        f.write(json.dumps({"messages": c["messages"], "type": c["type"]}, ensure_ascii=False) + "\n")
save_file(tensors, os.path.join(out, "tensors.safetensors"))
with open(os.path.join(out, "cases.json"), "w") as f:
    json.dump({"names": [c["name"] for c in CASES], "video_fps": VIDEO_FPS, "cases": results}, f, indent=1,
              ensure_ascii=False)
print("train_data oracle:", {k: len(v["input_ids"]) for k, v in results.items()})
