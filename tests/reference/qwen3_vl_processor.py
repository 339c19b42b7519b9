"""Oracle: what transformers 5.17's Qwen3VLProcessor (Qwen2VLImageProcessor + Qwen3VLVideoProcessor,
the classes AutoProcessor gives a Qwen3-VL directory) makes of images and videos.

Writes into <out>:
  models/<cfg>/        preprocessor_config.json, video_preprocessor_config.json (where the case has
                       one), config.json and a word-level tokenizer: "published" (the Qwen3-VL
                       releases' processor settings), "small", "capped" (cap_pixels_per_frame) and
                       "by_model_type" (no video config and no processor types: AutoVideoProcessor
                       picks the video processor from config.json's model_type)
  kinds/<variant>/     directories without a video config; cases.json video_kinds holds the class
                       AutoVideoProcessor picks for each
  inputs.safetensors   <case>.frames (every frame of the source video, uint8 [T, H, W, 3]) and
                       <case>.image<i> (uint8 [H, W, 3])
  outputs.safetensors  <case>.pixel_values_videos / .video_grid_thw / .pixel_values / .image_grid_thw
  cases.json           per case: model, the source's fps, the frame indices the reference sampled,
                       the text before and after placeholder expansion; the processor classes;
                       smart_resize and sample_frames tables from the reference functions
"""
import json, os, sys

import numpy as np
import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoProcessor, AutoVideoProcessor, PreTrainedTokenizerFast
from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor, smart_resize
from transformers.video_utils import VideoMetadata

out = sys.argv[1]
rng = np.random.default_rng(4321)


def content(t, h, w):
    """Smooth gradients that move from frame to frame, plus noise."""
    y, x = np.mgrid[0:h, 0:w]
    frames = []
    for f in range(t):
        planes = [(x * 255 // max(w - 1, 1) + 9 * f) % 256, (y * 255 // max(h - 1, 1) + 5 * f) % 256,
                  ((x + y) * 7 + 13 * f) % 256]
        frames.append(np.clip(np.stack(planes, -1) + rng.integers(-30, 31, (h, w, 3)), 0, 255))
    return np.stack(frames).astype(np.uint8)


vocab = {"[UNK]": 0, "a": 1, "b": 2, "c": 3, "<|image_pad|>": 4, "<|video_pad|>": 5, "<|vision_start|>": 6,
         "<|vision_end|>": 7}
word_level = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
word_level.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=word_level, unk_token="[UNK]")
tokenizer.add_special_tokens({"additional_special_tokens": ["<|image_pad|>", "<|video_pad|>", "<|vision_start|>",
                                                            "<|vision_end|>"]})

HALF = [0.5, 0.5, 0.5]
PUBLISHED_IMAGE = {"size": {"longest_edge": 16777216, "shortest_edge": 65536}, "patch_size": 16,
                   "temporal_patch_size": 2, "merge_size": 2, "image_mean": HALF, "image_std": HALF,
                   "processor_class": "Qwen3VLProcessor", "image_processor_type": "Qwen2VLImageProcessorFast"}
PUBLISHED_VIDEO = {"size": {"longest_edge": 25165824, "shortest_edge": 4096}, "patch_size": 16,
                   "temporal_patch_size": 2, "merge_size": 2, "image_mean": HALF, "image_std": HALF,
                   "do_sample_frames": True, "fps": 2, "min_frames": 4, "max_frames": 768,
                   "processor_class": "Qwen3VLProcessor", "video_processor_type": "Qwen3VLVideoProcessor"}
configs = {
    "published": (PUBLISHED_IMAGE, PUBLISHED_VIDEO),
    "small": (PUBLISHED_IMAGE, {**PUBLISHED_VIDEO, "size": {"shortest_edge": 32 * 32 * 2, "longest_edge": 32 * 32 * 24},
                                "fps": 3.0, "min_frames": 2, "max_frames": 8}),
    "capped": (PUBLISHED_IMAGE, {**PUBLISHED_VIDEO, "size": {"shortest_edge": 32 * 32 * 2, "longest_edge": 32 * 32 * 40},
                                 "cap_pixels_per_frame": True, "max_video_tokens": 6}),
    "by_model_type": ({"patch_size": 16, "image_mean": HALF, "image_std": HALF,
                       "size": {"longest_edge": 32 * 32 * 64, "shortest_edge": 32 * 32 * 4}}, None),
}
processors, kinds = {}, {}
for cfg, (image_cfg, video_cfg) in configs.items():
    d = os.path.join(out, "models", cfg)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
        json.dump(image_cfg, f, indent=1)
    if video_cfg is not None:
        with open(os.path.join(d, "video_preprocessor_config.json"), "w") as f:
            json.dump(video_cfg, f, indent=1)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"model_type": "qwen3_vl"}, f)
    tokenizer.save_pretrained(d)
    if cfg == "by_model_type":
        processors[cfg] = AutoVideoProcessor.from_pretrained(d)
        kinds[cfg] = [type(processors[cfg]).__name__]
    else:
        processors[cfg] = AutoProcessor.from_pretrained(d)
        p = processors[cfg]
        kinds[cfg] = [type(p).__name__, type(p.image_processor).__name__, type(p.video_processor).__name__]
assert kinds["by_model_type"] == ["Qwen3VLVideoProcessor"], kinds
assert all(k[0] == "Qwen3VLProcessor" and k[2] == "Qwen3VLVideoProcessor" for c, k in kinds.items()
           if c != "by_model_type"), kinds

# Which video processor AutoVideoProcessor picks when a directory has no video config: the one
# its image_processor_type names with "VideoProcessor" for "ImageProcessor" if that class exists,
# else the one of config.json's model_type (processor_class plays no part).
video_kinds = {}
for name, image_cfg in {"no_type": {}, "qwen2_image_type": {"image_processor_type": "Qwen2VLImageProcessor"},
                        "fast_image_type": {"image_processor_type": "Qwen2VLImageProcessorFast",
                                            "processor_class": "Qwen3VLProcessor"},
                        "processor_class_only": {"processor_class": "Qwen3VLProcessor"}}.items():
    for model_type in ["qwen3_vl", "qwen2_5_vl"]:
        d = os.path.join(out, "kinds", f"{name}.{model_type}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
            json.dump(image_cfg, f)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump({"model_type": model_type}, f)
        video_kinds[f"{name}.{model_type}"] = type(AutoVideoProcessor.from_pretrained(d)).__name__

inputs, outputs, cases = {}, {}, []


class Recording:
    """Captures the text the tokenizer receives (the expanded placeholders)."""

    def __init__(self, processor):
        self.captured = []
        base = type(processor.tokenizer)
        owner = self

        class R(base):
            def __call__(self, text=None, *a, **k):
                owner.captured.append(list(text))
                return super().__call__(text, *a, **k)

        processor.tokenizer.__class__ = R


recorders = {cfg: Recording(p) for cfg, p in processors.items() if cfg != "by_model_type"}


def run(case, cfg, text, images=(), video=None, fps=None):
    p = processors[cfg]
    kw = {}
    entry = {"name": case, "model": cfg, "text": text, "images": len(images)}
    for i, img in enumerate(images):
        inputs[f"{case}.image{i}"] = torch.from_numpy(img)
    if video is not None:
        inputs[f"{case}.frames"] = torch.from_numpy(video)
        metadata = {"total_num_frames": len(video), "fps": fps, "frames_indices": list(range(len(video)))}
        kw["videos"] = [video]
        kw["videos_kwargs"] = {"video_metadata": [metadata]}
        vp = p if cfg == "by_model_type" else p.video_processor
        entry["fps"] = fps
        entry["indices"] = [int(i) for i in vp.sample_frames(VideoMetadata(**metadata))]
    if cfg == "by_model_type":
        r = p(videos=kw["videos"], video_metadata=kw["videos_kwargs"]["video_metadata"], return_tensors="pt")
    else:
        r = p(text=[text], images=list(images) or None, return_tensors="pt", **kw)
        entry["expanded"] = recorders[cfg].captured[-1][0]
    for key in ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw"):
        if key in r:
            outputs[f"{case}.{key}"] = r[key].float().contiguous() if "pixel" in key else r[key].contiguous()
    cases.append(entry)


VS = "<|vision_start|>{}<|vision_end|>"
run("published/image_video", "published", "a " + VS.format("<|image_pad|>") + " b " + VS.format("<|video_pad|>") + " c",
    images=[content(1, 61, 97)[0]], video=content(20, 50, 70), fps=10.0)
run("published/two_images", "published", VS.format("<|image_pad|>") + "a" + VS.format("<|image_pad|>"),
    images=[content(1, 40, 300)[0], content(1, 33, 20)[0]])
run("small/long", "small", "a " + VS.format("<|video_pad|>"), video=content(61, 45, 67), fps=29.97)
run("small/short", "small", VS.format("<|video_pad|>") + " b", video=content(3, 70, 40), fps=30.0)
run("small/odd_count", "small", VS.format("<|video_pad|>"), video=content(17, 33, 71), fps=6.0)
run("capped/clip", "capped", VS.format("<|video_pad|>"), video=content(30, 90, 60), fps=10.0)
run("by_model_type/clip", "by_model_type", "", video=content(12, 64, 80), fps=4.0)

save_file(inputs, os.path.join(out, "inputs.safetensors"))
save_file(outputs, os.path.join(out, "outputs.safetensors"))

resize_table = []
for t, h, w in [(2, 10, 12), (4, 1, 1), (3, 27, 28), (8, 42, 42), (16, 70, 70), (5, 98, 14), (9, 155, 301),
                (64, 700, 1000), (768, 1080, 1920), (2, 4000, 3000), (4, 32, 6400), (4, 32, 6401), (1, 64, 64),
                (4, 8192, 41)]:
    for factor, lo, hi in [(32, 4096, 25165824), (32, 32 * 32 * 2, 32 * 32 * 24), (28, 128 * 28 * 28, 28 * 28 * 768)]:
        try:
            resize_table.append([t, h, w, factor, lo, hi, list(smart_resize(t, h, w, 2, factor, lo, hi)), None])
        except (ValueError, ZeroDivisionError) as e:
            resize_table.append([t, h, w, factor, lo, hi, None, str(e)])

sample_table = []
for total in [1, 2, 5, 7, 20, 61, 100, 301, 1000]:
    for video_fps in [10.0, 29.97, 30.0, 60.0]:
        for lo, hi in [(4, 768), (2, 10)]:
            for mode, value in [("fps", 0.5), ("fps", 1.0), ("fps", 2.0), ("fps", 3.3), ("num_frames", 1),
                                ("num_frames", 3), ("num_frames", 5), ("num_frames", 8)]:
                sampler = Qwen3VLVideoProcessor(min_frames=lo, max_frames=hi)
                meta = VideoMetadata(total_num_frames=total, fps=video_fps)
                kw = {"fps": value} if mode == "fps" else {"num_frames": value, "fps": None}
                if mode == "num_frames":
                    sampler.fps = None  # num_frames alone: the class fps would make them both set
                try:
                    idx = [int(i) for i in sampler.sample_frames(meta, **kw)]
                    err = None
                except (ValueError, ZeroDivisionError) as e:
                    idx, err = None, str(e)
                sample_table.append({"total": total, "video_fps": video_fps, "min_frames": lo, "max_frames": hi,
                                     mode: value, "indices": idx, "error": err})

timestamps = []
for indices, fps, tps in [([0, 6, 13, 19], 10.0, 2), ([0, 4, 9], 3.0, 2), ([5], 24.0, 2), ([0, 1, 2, 3, 4, 5], 7.0, 3),
                          ([2, 17, 33, 50], 29.97, 2)]:
    got = processors["published"]._calculate_timestamps(list(indices), fps, tps)
    timestamps.append({"indices": indices, "fps": fps, "tps": tps, "timestamps": [float(x) for x in got],
                       "text": "".join(f"<{x:.1f} seconds>" for x in got)})

with open(os.path.join(out, "cases.json"), "w") as f:
    json.dump({"processor_classes": kinds, "video_kinds": video_kinds, "cases": cases, "smart_resize": resize_table,
               "sample_frames": sample_table, "timestamps": timestamps}, f, indent=1)
print(f"wrote {len(cases)} processor cases, {len(resize_table)} smart_resize, {len(sample_table)} sample_frames rows")
