"""Oracle: transformers' CLIPVisionModel and CLIPImageProcessor (Wan2.1 I2V's image conditioning).

Models, each in <out>/<name>/: config.json + model.safetensors and cases.safetensors with, per
case i: case<i>.pixel_values, case<i>.hidden_states.<j> for every entry of
output_hidden_states=True, case<i>.last_hidden_state and case<i>.pooler_output (fp32, SDPA as
transformers picks by default).
  "a": quick_gelu, checkpoint names with the "vision_model." prefix (as released checkpoints such
       as Wan2.1-I2V's image_encoder were written by transformers 4.x);
  "b": gelu, layer_norm_eps 1e-6, image size not a multiple of the patch size, names without the
       prefix (as transformers 5.17's save_pretrained writes them);
  "c": a full CLIPModel (config "clip" with a vision_config, text tower and projections in the
       checkpoint); the reference is its vision_model.

Processors, each in <out>/processor/<name>/: preprocessor_config.json (save_pretrained) and
cases.safetensors with, per case i: case<i>.image<k> (uint8 [H, W, 3]), case<i>.pixel_values from
CLIPImageProcessor (what diffusers' WanImageToVideoPipeline loads: in transformers 5.17 the
torchvision backend) given PIL images, and case<i>.pil_pixel_values from CLIPImageProcessorPil
(the PIL backend) for the record.
"""
import os, sys

import numpy as np
import torch
from PIL import Image
from safetensors.torch import load_file, save_file
from transformers import (CLIPConfig, CLIPImageProcessor, CLIPImageProcessorPil, CLIPModel,
                          CLIPVisionConfig, CLIPVisionModel)
from transformers.image_processing_backends import TorchvisionBackend
from transformers.utils.logging import disable_progress_bar

torch.set_num_threads(1)
disable_progress_bar()
out_dir = sys.argv[1]


def randomize(model):
    """Unit-scale activations, so that a wrong op shows as a large difference."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias") or name.endswith("class_embedding") or "position_embedding" in name:
                p.copy_(torch.randn_like(p) * (0.1 if name.endswith("bias") else 1.0))
            elif p.dim() >= 2:
                p.copy_(torch.randn_like(p) / p[0].numel() ** 0.5)


def write_model(name, vision, kwargs, prefix):
    target = os.path.join(out_dir, name)
    full = isinstance(vision, CLIPModel)
    model = vision.vision_model if full else vision
    vision.save_pretrained(target)
    path = os.path.join(target, "model.safetensors")
    if prefix:
        tensors = load_file(path)
        save_file({f"vision_model.{k}": v for k, v in tensors.items()}, path, metadata={"format": "pt"})
    names = load_file(path).keys()
    assert all(k.startswith("vision_model.") == (prefix or full) for k in names if "text" not in k
               and "projection" not in k and "logit" not in k), sorted(names)
    size = kwargs["image_size"]
    tensors = {}
    for i, batch in enumerate([1, 3]):
        pixels = torch.randn(batch, 3, size, size)
        with torch.no_grad():
            out = model(pixel_values=pixels, output_hidden_states=True)
        assert len(out.hidden_states) == kwargs["num_hidden_layers"] + 1
        tensors[f"case{i}.pixel_values"] = pixels
        for j, h in enumerate(out.hidden_states):
            tensors[f"case{i}.hidden_states.{j}"] = h.clone()
        tensors[f"case{i}.last_hidden_state"] = out.last_hidden_state.clone()
        tensors[f"case{i}.pooler_output"] = out.pooler_output.contiguous()
    save_file(tensors, os.path.join(target, "cases.safetensors"))


VISION = {
    "a": dict(hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
              image_size=32, patch_size=8, hidden_act="quick_gelu"),
    "b": dict(hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=3,
              image_size=28, patch_size=8, hidden_act="gelu", layer_norm_eps=1e-6),
    "c": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
              image_size=32, patch_size=8, hidden_act="gelu"),
}
for name, kwargs in VISION.items():
    torch.manual_seed(ord(name))
    if name == "c":
        text = dict(vocab_size=50, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                    num_attention_heads=2, max_position_embeddings=12)
        model = CLIPModel(CLIPConfig(text_config=text, vision_config=kwargs, projection_dim=8)).eval()
    else:
        model = CLIPVisionModel(CLIPVisionConfig(**kwargs)).eval()
    assert model.config._attn_implementation == "sdpa"
    randomize(model)
    write_model(name, model, kwargs, prefix=name == "a")

# Processors. "wan" is Wan2.1-I2V's image_processor/preprocessor_config.json (the CLIP defaults).
CLIP_MEAN, CLIP_STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
PROCESSORS = {
    "wan": (dict(do_resize=True, size={"shortest_edge": 224}, resample=3, do_center_crop=True,
                 crop_size={"height": 224, "width": 224}, do_rescale=True, rescale_factor=1 / 255,
                 do_normalize=True, image_mean=CLIP_MEAN, image_std=CLIP_STD, do_convert_rgb=True),
            # (height, width) per image of a case; same-sized images of a case go through as one batch
            [[(480, 832)], [(100, 150)], [(300, 200)], [(224, 224)], [(50, 400)], [(225, 1000)],
             [(240, 320), (240, 320)], [(500, 300), (120, 120)]]),
    # A crop wider than the resized image (zero padding), other mean / std / rescale factor.
    "pad": (dict(size={"shortest_edge": 40}, crop_size={"height": 32, "width": 48},
                 rescale_factor=1 / 127.5, image_mean=[0.5, 0.4, 0.3], image_std=[0.2, 0.25, 0.3]),
            [[(60, 40)], [(33, 21)], [(90, 120)]]),
    # A fixed (height, width) resize and no center crop.
    "fixed": (dict(size={"height": 30, "width": 50}, do_center_crop=False),
              [[(64, 64)], [(20, 90)]]),
}
rng = np.random.default_rng(0)


def make_image(h, w):
    """Smooth structure plus noise: both the interpolation and its rounding show."""
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([128 + 100 * np.sin(x / 7.0 + c) * np.cos(y / 5.0 - c) for c in range(3)], -1)
    return np.clip(base + rng.normal(0, 25, (h, w, 3)), 0, 255).astype(np.uint8)


for name, (kwargs, cases) in PROCESSORS.items():
    target = os.path.join(out_dir, "processor", name)
    CLIPImageProcessor(**kwargs).save_pretrained(target)
    processor = CLIPImageProcessor.from_pretrained(target)
    assert isinstance(processor, TorchvisionBackend), type(processor)
    pil_processor = CLIPImageProcessorPil.from_pretrained(target)
    tensors = {}
    for i, sizes in enumerate(cases):
        images = [make_image(h, w) for h, w in sizes]
        pil = [Image.fromarray(a) for a in images]
        for k, a in enumerate(images):
            tensors[f"case{i}.image{k}"] = torch.from_numpy(a)
        tensors[f"case{i}.pixel_values"] = processor(images=pil, return_tensors="pt").pixel_values
        tensors[f"case{i}.pil_pixel_values"] = pil_processor(images=pil, return_tensors="pt").pixel_values
    save_file(tensors, os.path.join(target, "cases.safetensors"))
print("ok")
