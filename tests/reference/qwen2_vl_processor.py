"""Oracle: image files written with PIL, and what transformers 5.17 makes of them.

Writes into <out>:
  images/*           PNG (every colour type incl. palette+tRNS and 16-bit), JPEG (RGB, grey,
                     CMYK, progressive), WebP (lossy, lossless with alpha)
  decoded.safetensors  PIL's Image.open(f).convert("RGB") of every image, uint8 [H, W, 3]
  models/<cfg>/      preprocessor configs (+ a tiny tokenizer) loaded with AutoProcessor, i.e.
                     Qwen2_5_VLProcessor with Qwen2VLImageProcessor (torchvision backend) and
                     Qwen2VLVideoProcessor, the classes a user gets by default
  inputs.safetensors   video frames given to the processor, uint8 [T, H, W, 3]
  outputs.safetensors  <case>.pixel_values / <case>.grid_thw of every case
  cases.json         the cases, smart_resize and sample_frames tables, placeholder expansion
"""
import json, os, struct, sys, zlib

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoProcessor, PreTrainedTokenizerFast
from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize
from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor
from transformers.video_utils import VideoMetadata

out = sys.argv[1]
img_dir = os.path.join(out, "images")
os.makedirs(img_dir, exist_ok=True)
rng = np.random.default_rng(1234)


def content(h, w, c):
    """Smooth gradients plus noise: exercises both resampling and JPEG."""
    y, x = np.mgrid[0:h, 0:w]
    base = [(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)), ((x + y) * 7) % 256, (x * y) % 256]
    planes = [np.clip(base[i % 4] + rng.integers(-40, 41, (h, w)), 0, 255) for i in range(c)]
    return np.stack(planes, -1).astype(np.uint8)


def write_png(path, arr, color_type, depth):
    """A plain PNG writer for the 16-bit cases PIL cannot write."""
    h, w = arr.shape[:2]
    rows = b"".join(b"\x00" + arr[y].astype(">u2" if depth == 16 else "u1").tobytes() for y in range(h))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


files = []


def save(name, img, **kw):
    img.save(os.path.join(img_dir, name), **kw)
    files.append(name)


save("rgb_37x53.png", Image.fromarray(content(53, 37, 3)))
save("rgb_301x155.png", Image.fromarray(content(155, 301, 3)))
save("tiny_10x12.png", Image.fromarray(content(12, 10, 3)))
save("grey_41x29.png", Image.fromarray(content(29, 41, 1)[..., 0], "L"))
save("grey_alpha_23x31.png", Image.fromarray(content(31, 23, 2), "LA"))
rgba = content(47, 64, 4)
rgba[..., 3] = np.arange(47 * 64).reshape(47, 64) % 256  # every alpha value, 0 and 255 included
save("rgba_64x47.png", Image.fromarray(rgba, "RGBA"))
pal = Image.fromarray((content(35, 33, 1)[..., 0] % 16).astype(np.uint8), "P")
pal.putpalette(rng.integers(0, 256, 48).astype(np.uint8).tobytes())
save("palette_33x35.png", pal)
save("palette_trns_33x35.png", pal, transparency=bytes(rng.integers(0, 256, 16).astype(np.uint8)))
save("bilevel_19x13.png", Image.fromarray(content(13, 19, 1)[..., 0] > 127))
for name, ct, ch in [("grey16_21x17.png", 0, 1), ("grey_alpha16_21x17.png", 4, 2),
                     ("rgb16_21x17.png", 2, 3), ("rgba16_21x17.png", 6, 4)]:
    a = rng.integers(0, 65536, (17, 21, ch), dtype=np.uint16)
    if ch == 1:
        a[..., 0] = rng.integers(0, 400, (17, 21))  # both sides of PIL's clip at 255
    write_png(os.path.join(img_dir, name), a if ch > 1 else a[..., 0], ct, 16)
    files.append(name)
save("photo_97x61.jpg", Image.fromarray(content(61, 97, 3)), quality=90)
save("progressive_50x40.jpg", Image.fromarray(content(40, 50, 3)), quality=85, progressive=True)
save("grey_45x39.jpg", Image.fromarray(content(39, 45, 1)[..., 0], "L"), quality=90)
save("cmyk_40x30.jpg", Image.fromarray(content(30, 40, 4), "CMYK"), quality=95)
save("huge_1000x700.jpg", Image.fromarray(content(700, 1000, 3)), quality=80)
save("lossy_57x43.webp", Image.fromarray(content(43, 57, 3)), quality=80)
save("lossless_alpha_31x29.webp", Image.fromarray(content(29, 31, 4), "RGBA"), lossless=True)
save("lossy_alpha_31x29.webp", Image.fromarray(content(29, 31, 4), "RGBA"), quality=70)

decoded = {}
pil_modes = {}
for name in files:
    with Image.open(os.path.join(img_dir, name)) as im:
        pil_modes[name] = im.mode
        decoded[name] = torch.from_numpy(np.array(im.convert("RGB"))).contiguous()
save_file(decoded, os.path.join(out, "decoded.safetensors"))

# For the record: the default torchvision processor decodes *path strings* with torchvision.io,
# not PIL; say where the two disagree.
from torchvision.io import ImageReadMode, decode_image  # noqa: E402
torchvision_vs_pil = {}
for name in files:
    t = decode_image(os.path.join(img_dir, name), mode=ImageReadMode.RGB)
    if t.dtype != torch.uint8:
        torchvision_vs_pil[name] = f"torchvision gives {t.dtype}"
    else:
        torchvision_vs_pil[name] = int((t.permute(1, 2, 0).int() - decoded[name].int()).abs().max())

# --- processor configs -----------------------------------------------------------------------
vocab = {"[UNK]": 0, "a": 1, "b": 2, "c": 3, "<|image_pad|>": 4, "<|video_pad|>": 5}
word_level = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
word_level.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=word_level, unk_token="[UNK]")
tokenizer.add_special_tokens({"additional_special_tokens": ["<|image_pad|>", "<|video_pad|>"]})

QWEN25 = {  # Qwen2.5-VL-7B-Instruct's preprocessor_config.json
    "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2,
    "merge_size": 2, "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711], "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen2_5_VLProcessor"}
# transformers 5.17's Qwen2VL processors write min/max_pixels into the *class* default size dict,
# so "defaults" must be loaded first, and every other config sets both sizes explicitly.
configs = {
    "defaults": ({"image_processor_type": "Qwen2VLImageProcessor"}, None),
    "qwen25": (QWEN25, None),
    "small": ({"size": {"shortest_edge": 28 * 28 * 3, "longest_edge": 28 * 28 * 20}, "do_resize": True,
               "resample": 3},
              {"size": {"shortest_edge": 28 * 28 * 4, "longest_edge": 28 * 28 * 12}, "fps": 2.0,
               "min_frames": 2, "max_frames": 8}),
    "rescale_only": ({"min_pixels": 1000, "max_pixels": 20000, "do_normalize": False}, None),
    "normalize_only": ({"min_pixels": 1000, "max_pixels": 20000, "do_rescale": False,
                        "image_mean": 0.5, "image_std": 0.5}, None),
    "odd_patch": ({"min_pixels": 1024, "max_pixels": 16 * 16 * 40, "patch_size": 8, "merge_size": 2,
                   "temporal_patch_size": 3, "image_mean": [0.1, 0.2, 0.3], "image_std": [0.9, 0.8, 0.7],
                   "rescale_factor": 0.004},
                  {"min_pixels": 1024, "max_pixels": 16 * 16 * 30, "patch_size": 8, "merge_size": 2,
                   "temporal_patch_size": 3, "image_mean": [0.1, 0.2, 0.3], "image_std": [0.9, 0.8, 0.7],
                   "rescale_factor": 0.004}),
    "capped": ({"min_pixels": 3136, "max_pixels": 50000},
               {"min_pixels": 28 * 28 * 2, "max_pixels": 28 * 28 * 40, "cap_pixels_per_frame": True,
                "max_video_tokens": 20}),
}
processors = {}
for cfg, (image_cfg, video_cfg) in configs.items():
    d = os.path.join(out, "models", cfg)
    os.makedirs(d, exist_ok=True)
    image_cfg = {"image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor",
                 **image_cfg}
    with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
        json.dump(image_cfg, f, indent=1)
    if video_cfg is not None:
        with open(os.path.join(d, "video_preprocessor_config.json"), "w") as f:
            json.dump({"video_processor_type": "Qwen2VLVideoProcessor", **video_cfg}, f, indent=1)
    tokenizer.save_pretrained(d)
    processors[cfg] = AutoProcessor.from_pretrained(d)

kinds = {cfg: [type(p).__name__, type(p.image_processor).__name__, type(p.video_processor).__name__]
         for cfg, p in processors.items()}
assert all(k == ["Qwen2_5_VLProcessor", "Qwen2VLImageProcessor", "Qwen2VLVideoProcessor"]
           for k in kinds.values()), kinds

outputs, inputs, cases = {}, {}, []


def run_images(case, cfg, names):
    images = [Image.open(os.path.join(img_dir, n)) for n in names]
    r = processors[cfg](images=images, return_tensors="pt")
    outputs[case + ".pixel_values"] = r["pixel_values"].float().contiguous()
    outputs[case + ".grid_thw"] = r["image_grid_thw"].contiguous()
    cases.append({"name": case, "kind": "images", "model": cfg, "files": names})


def run_video(case, cfg, frames, metadata=None):
    inputs[case + ".frames"] = torch.from_numpy(frames).contiguous()
    kwargs = {"videos_kwargs": {"video_metadata": [metadata]}} if metadata else {}
    r = processors[cfg](videos=[frames], return_tensors="pt", **kwargs)
    outputs[case + ".pixel_values"] = r["pixel_values_videos"].float().contiguous()
    outputs[case + ".grid_thw"] = r["video_grid_thw"].contiguous()
    sampled_fps = VideoMetadata(**metadata).sampled_fps if metadata else None
    cases.append({"name": case, "kind": "video", "model": cfg, "sampled_fps": sampled_fps,
                  "second_per_grid_ts": [float(x) for x in r["second_per_grid_ts"]]})


for name in files:
    run_images(f"defaults/{name}", "defaults", [name])
run_images("defaults/three", "defaults", ["rgb_37x53.png", "photo_97x61.jpg", "grey_41x29.png"])
run_images("qwen25/two", "qwen25", ["rgb_301x155.png", "rgba_64x47.png"])
run_images("small/huge", "small", ["huge_1000x700.jpg"])
run_images("small/tiny", "small", ["tiny_10x12.png"])
run_images("rescale_only", "rescale_only", ["rgb_37x53.png"])
run_images("normalize_only", "normalize_only", ["rgb_37x53.png"])
run_images("odd_patch/images", "odd_patch", ["rgb_301x155.png", "tiny_10x12.png"])
run_video("defaults/video5", "defaults", content(45, 67, 3)[None].repeat(5, 0) // np.arange(1, 6, dtype=np.uint8)[:, None, None, None])
run_video("small/video6", "small", np.stack([content(33, 71, 3) for _ in range(6)]),
          {"total_num_frames": 20, "fps": 10.0, "frames_indices": [0, 4, 8, 12, 16, 19]})
run_video("odd_patch/video5", "odd_patch", np.stack([content(29, 43, 3) for _ in range(5)]))
run_video("capped/video7", "capped", np.stack([content(60, 90, 3) for _ in range(7)]),
          {"total_num_frames": 7, "fps": 3.0, "frames_indices": list(range(7))})

save_file(outputs, os.path.join(out, "outputs.safetensors"))
save_file(inputs, os.path.join(out, "inputs.safetensors"))

# --- placeholder expansion through the full processor (the text its tokenizer receives) -------
captured = []
p = processors["small"]
base = type(p.tokenizer)


class Recording(base):
    def __call__(self, text=None, *args, **kwargs):
        captured.append(list(text))
        return super().__call__(text, *args, **kwargs)


p.tokenizer.__class__ = Recording
text = "a <|image_pad|> b <|video_pad|>c<|image_pad|><|image_pad|>"
tiny = [Image.open(os.path.join(img_dir, n)) for n in ["tiny_10x12.png", "rgb_37x53.png", "grey_41x29.png"]]
r = p(text=[text], images=tiny, videos=[np.stack([content(33, 71, 3) for _ in range(4)])], return_tensors="pt")
placeholders = {"text": text, "expanded": captured[0][0], "merge_size": 2,
                "image_grid_thw": r["image_grid_thw"].tolist(), "video_grid_thw": r["video_grid_thw"].tolist()}

# --- smart_resize and sample_frames tables, straight from the reference functions -------------
resize_table = []
for h, w in [(10, 12), (1, 1), (27, 28), (42, 42), (70, 70), (98, 14), (37, 53), (155, 301), (700, 1000),
             (1080, 1920), (4000, 3000), (28, 5600), (28, 5601), (1, 200), (1, 201), (3, 601), (8192, 41)]:
    for factor, lo, hi in [(28, 56 * 56, 28 * 28 * 1280), (28, 28 * 28 * 3, 28 * 28 * 20), (16, 1024, 16 * 16 * 40),
                           (32, 32 * 32 * 4, 32 * 32 * 4)]:
        try:
            resize_table.append([h, w, factor, lo, hi, list(smart_resize(h, w, factor, lo, hi)), None])
        except (ValueError, ZeroDivisionError) as e:
            resize_table.append([h, w, factor, lo, hi, None, str(e)])

sampler = Qwen2VLVideoProcessor()
sample_table = []
for total in [1, 2, 5, 7, 20, 61, 100, 301, 1000]:
    for video_fps in [10.0, 29.97, 30.0, 60.0]:
        for tps in [1, 2, 3]:
            for lo, hi in [(4, 768), (2, 10)]:
                for mode, value in [("fps", 0.5), ("fps", 1.0), ("fps", 2.0), ("fps", 3.3), ("num_frames", 1),
                                    ("num_frames", 3), ("num_frames", 5), ("num_frames", 8), ("num_frames", 16)]:
                    meta = VideoMetadata(total_num_frames=total, fps=video_fps)
                    try:
                        idx = sampler.sample_frames(meta, temporal_patch_size=tps, min_frames=lo, max_frames=hi,
                                                    **{mode: value}).tolist()
                        err = None
                    except (ValueError, ZeroDivisionError) as e:
                        idx, err = None, str(e)
                    sample_table.append({"total": total, "video_fps": video_fps, "tps": tps, "min_frames": lo,
                                         "max_frames": hi, mode: value, "indices": idx, "error": err})

with open(os.path.join(out, "cases.json"), "w") as f:
    json.dump({"files": files, "pil_modes": pil_modes, "torchvision_vs_pil": torchvision_vs_pil,
               "processor_classes": kinds, "cases": cases, "placeholders": placeholders,
               "smart_resize": resize_table, "sample_frames": sample_table}, f, indent=1)
print(f"wrote {len(files)} images, {len(cases)} processor cases, {len(resize_table)} smart_resize and "
      f"{len(sample_table)} sample_frames rows; torchvision vs PIL: {torchvision_vs_pil}")
