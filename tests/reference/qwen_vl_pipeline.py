"""Oracle: the whole Qwen-VL (Qwen2.5-VL, Qwen2-VL, Qwen3-VL or Qwen3.5) chat pipeline as a
transformers user runs it.

Builds a Hugging Face model directory from parts the reference libraries make (the tokenizer the
tokenizer oracle trained, the official chat template of the family (Qwen2-VL's, Qwen3-VL
Instruct's or Qwen3.5's), the family's image and video processors with small pixel budgets (for
Qwen3-VL and Qwen3.5 its 16-pixel patches, 0.5 mean and std, and Qwen3VLVideoProcessor), a tiny
random model of the family: for Qwen3.5 a Gated DeltaNet layer and a gated-attention layer),
writes images and a video as files, and records for several conversations what
AutoProcessor + generate produce: the rendered prompt, input ids, pixel values, grids, and the
greedy answer.

Run by qwen2_5_vl_pipeline.py, qwen2_vl_pipeline.py, qwen3_vl_pipeline.py and qwen3_5_pipeline.py
(OUT_DIR [TOKENIZER_DIR]):
main(family, argv).
TOKENIZER_DIR defaults to OUT_DIR/../tokenizer_corpus (the tokenizer oracle's output).
"""
import json, os, shutil, subprocess, sys

import numpy as np
import torch
from PIL import Image, ImageDraw
from safetensors.torch import save_file
from transformers import (AutoProcessor, AutoTokenizer, Qwen2_5_VLConfig,
                          Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLProcessor, Qwen2VLConfig,
                          Qwen2VLForConditionalGeneration, Qwen2VLImageProcessor, Qwen2VLProcessor,
                          Qwen2VLVideoProcessor, Qwen3_5Config, Qwen3_5ForConditionalGeneration, Qwen3VLConfig,
                          Qwen3VLForConditionalGeneration, Qwen3VLProcessor, Qwen3VLVideoProcessor)
from transformers.video_utils import VideoMetadata

from qwen2_vl_chat_template import QWEN2_VL_CHAT_TEMPLATE
from qwen3_vl_chat_template import QWEN3_VL_INSTRUCT_TEMPLATE
from qwen3_5_chat_template import QWEN3_5_TEMPLATE

FAMILIES = {"qwen2_5_vl": (Qwen2_5_VLProcessor, Qwen2_5_VLForConditionalGeneration),
            "qwen2_vl": (Qwen2VLProcessor, Qwen2VLForConditionalGeneration),
            "qwen3_vl": (Qwen3VLProcessor, Qwen3VLForConditionalGeneration),
            "qwen3_5": (Qwen3VLProcessor, Qwen3_5ForConditionalGeneration)}  # Qwen3.5 takes Qwen3-VL's processor


def main(family, argv):
    processor_class, model_class = FAMILIES[family]
    out = os.path.abspath(argv[1])
    tok_dir = argv[2] if len(argv) > 2 else os.path.join(os.path.dirname(out), "tokenizer_corpus")
    model_dir = os.path.join(out, "model")
    media = os.path.join(out, "media")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(model_dir)
    os.makedirs(media)
    torch.manual_seed(0)

    # --- the model directory -------------------------------------------------------------------
    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    if family in ("qwen3_vl", "qwen3_5"):
        half = [0.5, 0.5, 0.5]
        image_processor = Qwen2VLImageProcessor(size={"shortest_edge": 32 * 32 * 4, "longest_edge": 32 * 32 * 20},
                                                patch_size=16, image_mean=half, image_std=half)
        # The whole clip's budget: 4 sampled frames of up to 32 * 32 * 6 pixels each.
        video_processor = Qwen3VLVideoProcessor(size={"shortest_edge": 32 * 32 * 4, "longest_edge": 32 * 32 * 24})
        template = QWEN3_VL_INSTRUCT_TEMPLATE if family == "qwen3_vl" else QWEN3_5_TEMPLATE
    else:
        image_processor = Qwen2VLImageProcessor(min_pixels=28 * 28 * 4, max_pixels=28 * 28 * 20)
        video_processor = Qwen2VLVideoProcessor(min_pixels=28 * 28 * 2, max_pixels=28 * 28 * 8)
        template = QWEN2_VL_CHAT_TEMPLATE
    processor_class(image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor,
                    chat_template=template).save_pretrained(model_dir)
    processor = AutoProcessor.from_pretrained(model_dir)  # what a user loads
    assert type(processor.image_processor).__name__ == "Qwen2VLImageProcessor", type(processor.image_processor)
    assert type(processor.video_processor).__name__ == type(video_processor).__name__, type(processor.video_processor)

    ids = tokenizer.convert_tokens_to_ids
    text_config = dict(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
                     eos_token_id=ids("<|im_end|>"), bos_token_id=ids("<|endoftext|>"))
    token_ids = dict(image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
                     vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"))
    if family == "qwen3_vl":
        config = Qwen3VLConfig(text_config=dict(text_config, head_dim=24, rope_parameters={
                                   "rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 4, 4],
                                   "mrope_interleaved": True}),
                               vision_config=dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=2,
                                                  out_hidden_size=64, patch_size=16, num_position_embeddings=16,
                                                  deepstack_visual_indexes=[0, 1]),
                               tie_word_embeddings=False, **token_ids)
    elif family == "qwen3_5":
        config = Qwen3_5Config(text_config=dict(text_config, head_dim=32, layer_types=["linear_attention", "full_attention"],
                                                linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
                                                linear_value_head_dim=12, linear_conv_kernel_dim=4, rope_parameters={
                                   "rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1],
                                   "mrope_interleaved": True, "partial_rotary_factor": 0.25}),
                               vision_config=dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=2,
                                                  out_hidden_size=64, patch_size=16, num_position_embeddings=16),
                               tie_word_embeddings=False, **token_ids)
    elif family == "qwen2_vl":
        config = Qwen2VLConfig(text_config=text_config, vision_config=dict(depth=2, embed_dim=32, hidden_size=64,
                                                                           mlp_ratio=2, num_heads=2, patch_size=14),
                               tie_word_embeddings=False, **token_ids)
    else:
        config = Qwen2_5_VLConfig(text_config=text_config,
                                  vision_config=dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=2,
                                                     out_hidden_size=64, patch_size=14, spatial_merge_size=2,
                                                     temporal_patch_size=2, window_size=56, fullatt_block_indexes=[1],
                                                     tokens_per_second=2),
                                  tie_word_embeddings=False, **token_ids)
    model = model_class(config).eval()
    with torch.no_grad():  # random init is small; widen it so answers depend on the inputs
        for p in model.parameters():
            p.normal_(0, 0.2 if p.dim() > 1 else 0.05)
    model.generation_config.eos_token_id = ids("<|im_end|>")
    model.generation_config.pad_token_id = ids("<|endoftext|>")
    model.save_pretrained(model_dir)

    # --- media files -----------------------------------------------------------------------------
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

    # 12 frames at 6 fps of a square moving over a gradient, stored losslessly as RGB so both sides
    # decode the same pixels.
    frames = np.zeros((12, 62, 90, 3), np.uint8)
    frames[..., 0] = np.linspace(0, 255, 90, dtype=np.uint8)[None, None, :]
    frames[..., 2] = np.linspace(255, 0, 62, dtype=np.uint8)[None, :, None]
    for t in range(12):
        frames[t, 20:40, 5 + 6 * t:25 + 6 * t] = (255, 255, 0)
    video_path = os.path.join(media, "moving.mkv")
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", "90x62",
                    "-r", "6", "-i", "-", "-c:v", "ffv1", "-pix_fmt", "bgr0", video_path],
                   input=frames.tobytes(), check=True)
    VIDEO_FPS = 2.0  # the sampling rate `mmtrain infer` uses by default

    # --- conversations -----------------------------------------------------------------------------
    png, jpg = os.path.join(media, "shapes.png"), os.path.join(media, "tall.jpg")
    CASES = {
        "text_only": [{"role": "user", "content": "Say something about shapes."}],
        "one_image": [{"role": "user", "content": [{"type": "image", "image": png},
                                                   {"type": "text", "text": "What is in the picture?"}]}],
        "two_images": [{"role": "system", "content": "You describe images."},
                       {"role": "user", "content": [{"type": "image", "image": png}, {"type": "image", "image": jpg},
                                                    {"type": "text", "text": "Compare them."}]}],
        "one_video": [{"role": "user", "content": [{"type": "video", "video": video_path},
                                                   {"type": "text", "text": "What moves?"}]}],
        "image_and_video": [{"role": "user", "content": [{"type": "text", "text": "First this:"},
                                                         {"type": "image", "image": jpg},
                                                         {"type": "text", "text": "then this:"},
                                                         {"type": "video", "video": video_path}]},
                            {"role": "assistant", "content": "A square."},
                            {"role": "user", "content": "Which colour is it?"}],
    }

    results, tensors = {}, {}
    for name, messages in CASES.items():
        prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        images = [Image.open(p["image"]) for m in messages if isinstance(m["content"], list)
                  for p in m["content"] if p["type"] == "image"]
        n_videos = sum(1 for m in messages if isinstance(m["content"], list) for p in m["content"] if p["type"] == "video")
        kwargs = {}
        if n_videos:
            kwargs = dict(videos=[frames] * n_videos, do_sample_frames=True, fps=VIDEO_FPS,
                          video_metadata=[VideoMetadata(total_num_frames=12, fps=6.0, duration=2.0)] * n_videos)
        inputs = processor(text=[prompt], images=images or None, return_tensors="pt", **kwargs)
        with torch.no_grad():
            out_ids = model.generate(**inputs, do_sample=False, max_new_tokens=32)
        new_ids = out_ids[0, inputs["input_ids"].shape[1]:].tolist()
        results[name] = {
            "messages": messages, "prompt": prompt, "input_ids": inputs["input_ids"][0].tolist(),
            "new_ids": new_ids, "answer": tokenizer.decode(new_ids, skip_special_tokens=True),
            "second_per_grid_ts": [float(x) for x in inputs.get("second_per_grid_ts", [])],
            "expanded": tokenizer.decode(inputs["input_ids"][0]),
        }
        for key in ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw"):
            if key in inputs:
                tensors[f"{name}.{key}"] = inputs[key].contiguous()

    save_file(tensors, os.path.join(out, "tensors.safetensors"))
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump({"video_fps": VIDEO_FPS, "model_dir": model_dir, "cases": results}, f, indent=1, ensure_ascii=False)
    print("pipeline oracle:", {k: len(v["new_ids"]) for k, v in results.items()})
