"""Oracle: what a transformers fine-tuning script feeds Qwen2.5-VL for whole conversations.

Builds a small Hugging Face model directory (the tokenizer the tokenizer oracle trained, the
official chat template, Qwen2-VL image/video processors with small pixel budgets, a tiny
Qwen2.5-VL config), media files, and for several conversations records what
Qwen2_5_VLProcessor(apply_chat_template(messages, add_generation_prompt=False)) gives (input ids,
pixel values, grids, second_per_grid_ts) and the M-RoPE positions of model.model.get_rope_index.
The same conversations are also written as dataset records in the three layouts users keep
(LLaVA, ShareGPT/LLaMA-Factory, OpenAI content parts) with paths relative to OUT_DIR.

Also conversations with tools (tool calls, consecutive tool responses, an image) through the
published Qwen3-VL Instruct template: the processor's ids with tools=..., and transformers'
assistant mask (return_assistant_tokens_mask over a {% generation %}-tagged copy of the template
that renders the same text), in the OpenAI and LLaMA-Factory (function_call/observation) layouts.

Usage: train_data.py OUT_DIR [TOKENIZER_DIR]   (default: OUT_DIR/../tokenizer_corpus)
Writes: model/, media/, llava.jsonl, sharegpt.json, openai.jsonl, cases.json, tensors.safetensors,
        model_tools/, tools_openai.jsonl, tools_sharegpt.json, tool_cases.json, tool_tensors.safetensors
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

# --- Conversations with tools, through the model's own template --------------------------------
# The same model with the published Qwen3-VL Instruct template (tool schemas in the system turn,
# <tool_call> blocks, consecutive tool responses in one user turn). Reference: the processor's
# apply_chat_template(messages, tools=...) gives the ids; the supervised tokens are transformers'
# assistant mask (return_assistant_tokens_mask) over a copy of the template with each reply's
# content and closing <|im_end|> between {% generation %} tags, checked to render the same text.
from qwen3_vl_chat_template import QWEN3_VL_INSTRUCT_TEMPLATE

tools_dir = os.path.join(out, "model_tools")
shutil.copytree(model_dir, tools_dir)
with open(os.path.join(tools_dir, "chat_template.jinja"), "w") as f:
    f.write(QWEN3_VL_INSTRUCT_TEMPLATE)


def tag_replies(template):
    open_reply = "{%- elif message.role == \"assistant\" %}\n        {{- '<|im_start|>' + message.role + '\\n' }}"
    close_reply = "{{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"tool\" %}"
    assert template.count(open_reply) == 1 and template.count(close_reply) == 1
    template = template.replace(open_reply, open_reply + "\n        {%- generation %}")
    return template.replace(close_reply, "{{- '<|im_end|>' }}\n        {%- endgeneration %}\n        {{- '\\n' }}\n"
                            "    {%- elif message.role == \"tool\" %}")


TAGGED_TEMPLATE = tag_replies(QWEN3_VL_INSTRUCT_TEMPLATE)
tools_processor = Qwen2_5_VLProcessor(image_processor=processor.image_processor, video_processor=processor.video_processor,
                                      tokenizer=tokenizer, chat_template=QWEN3_VL_INSTRUCT_TEMPLATE)
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city today.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string",
                   "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "local_time", "description": "The local time in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def call(name, **arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def sharegpt_call(*calls):  # LLaMA-Factory's function_call value: JSON text of {"name", "arguments"}
    items = [c["function"] for c in calls]
    return json.dumps(items[0] if len(items) == 1 else items, ensure_ascii=False)


TOOL_CASES = [
    dict(name="one_call", tools=[WEATHER],
         messages=[{"role": "user", "content": "Is it warm in Paris?"},
                   {"role": "assistant", "content": "", "tool_calls": [call("get_weather", city="Paris", unit="celsius")]},
                   {"role": "tool", "content": "{\"temperature\": 24, \"sky\": \"clear\"}"},
                   {"role": "assistant", "content": "Yes: 24 degrees and a clear sky."}]),
    dict(name="two_calls_two_responses", tools=[WEATHER, TIME],
         messages=[{"role": "system", "content": "You plan trips."},
                   {"role": "user", "content": "Weather and time in Oslo?"},
                   {"role": "assistant", "content": "", "tool_calls": [call("get_weather", city="Oslo"),
                                                                        call("local_time", city="Oslo")]},
                   {"role": "tool", "content": "{\"temperature\": -3}"},
                   {"role": "tool", "content": "{\"time\": \"14:05\"}"},
                   {"role": "assistant", "content": "Minus 3 degrees; it is 14:05 there."},
                   {"role": "user", "content": "Thanks!"},
                   {"role": "assistant", "content": "Have a good trip."}]),
    dict(name="image_text_and_call", tools=[WEATHER],
         messages=[{"role": "user", "content": [I(PNG), T("Where could this be? Check its weather.")]},
                   {"role": "assistant", "content": "It looks like Rome.",
                    "tool_calls": [call("get_weather", city="Rome")]},
                   {"role": "tool", "content": "sunny"},
                   {"role": "assistant", "content": "Rome, and it is sunny."}]),
]
tool_results, tool_tensors = {}, {}
for case in TOOL_CASES:
    name, messages = case["name"], absolute(case["messages"])
    plain = tools_processor.apply_chat_template(messages, tools=case["tools"], tokenize=True, return_dict=True,
                                                return_tensors="pt")
    # The mask from the tokenizer's render (one <|image_pad|> per image; the processor's own mask
    # misplaces the replies after an image, its offsets being those of the unexpanded text), with
    # each image's placeholder then expanded to its merged patches as the processor does.
    tagged = tokenizer.apply_chat_template(messages, tools=case["tools"], tokenize=True, return_dict=True,
                                           chat_template=TAGGED_TEMPLATE, return_assistant_tokens_mask=True)
    grids = iter(plain["image_grid_thw"].tolist() if "image_grid_thw" in plain else [])
    expanded, mask = [], []
    for token, masked in zip(tagged["input_ids"], tagged["assistant_masks"]):
        n = (lambda g: g[0] * g[1] * g[2] // 4)(next(grids)) if token == config.image_token_id else 1
        expanded += [token] * n
        mask += [masked] * n
    assert expanded == plain["input_ids"][0].tolist(), name
    assert sum(mask) > 0, name
    tool_results[name] = {
        "prompt": tools_processor.apply_chat_template(messages, tools=case["tools"], tokenize=False),
        "input_ids": plain["input_ids"][0].tolist(), "assistant_mask": [int(x) for x in mask]}
    for key in ("pixel_values", "image_grid_thw"):
        if key in plain:
            tool_tensors[f"{name}.{key}"] = plain[key].contiguous()

with open(os.path.join(out, "tools_openai.jsonl"), "w") as f:
    for c in TOOL_CASES:
        f.write(json.dumps({"messages": c["messages"], "tools": c["tools"]}, ensure_ascii=False) + "\n")
# LLaMA-Factory's layout for the cases it can write (a function_call turn has no text of its own):
# function_call / observation turns, tools as a JSON string.
with open(os.path.join(out, "tools_sharegpt.json"), "w") as f:
    records = []
    for c in TOOL_CASES:
        if any(m["role"] == "assistant" and m.get("tool_calls") and m["content"] for m in c["messages"]):
            continue
        turns, system = [], None
        for m in c["messages"]:
            if m["role"] == "system":
                system = m["content"]
            elif m.get("tool_calls"):
                turns.append({"from": "function_call", "value": sharegpt_call(*m["tool_calls"])})
            else:
                turns.append({"from": {"user": "human", "assistant": "gpt", "tool": "observation"}[m["role"]],
                              "value": m["content"]})
        record = {"conversations": turns, "tools": json.dumps(c["tools"], ensure_ascii=False), "name": c["name"]}
        if system:
            record["system"] = system
        records.append(record)
    json.dump(records, f, ensure_ascii=False, indent=1)
save_file(tool_tensors, os.path.join(out, "tool_tensors.safetensors"))
with open(os.path.join(out, "tool_cases.json"), "w") as f:
    json.dump({"names": [c["name"] for c in TOOL_CASES], "cases": tool_results}, f, indent=1, ensure_ascii=False)
print("train_data oracle, tool cases:", {k: sum(v["assistant_mask"]) for k, v in tool_results.items()})
