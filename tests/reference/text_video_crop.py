"""Oracle: DiffSynth-Studio's ImageCropAndResize (the per-frame resize and crop of its Wan video
datasets) with torchvision on PIL images, for the text-to-video dataset's crops.

DiffSynth-Studio is not a dependency; its crop_and_resize is four torchvision calls, restated here:
    scale = max(target_width / width, target_height / height)
    image = torchvision.transforms.functional.resize(
        image, (round(height * scale), round(width * scale)), interpolation=BILINEAR)
    image = torchvision.transforms.functional.center_crop(image, (target_height, target_width))
followed by its tensor conversion, float32(pixels) * (2 / 255) - 1, channels first.

Writes <out>/case<i>.png (RGB test images: smooth gradients plus noise, so resampling differences
show) and <out>/cases.safetensors with case<i>.bucket [2] (height, width), case<i>.resized [2]
(the size before the crop) and case<i>.expected float32 [3, height, width].
"""
import os, sys

import numpy as np
import torch
import torchvision.transforms.functional as TF
from PIL import Image
from safetensors.torch import save_file
from torchvision.transforms import InterpolationMode

out_dir = sys.argv[1]
os.makedirs(out_dir, exist_ok=True)
rng = np.random.default_rng(0)

# (image width, image height, bucket height, bucket width): downscale with a vertical crop, a
# tall bucket with a horizontal crop, an upscale, the identity, an odd-sized downscale.
CASES = [(200, 120, 32, 64), (97, 61, 48, 32), (40, 30, 48, 64), (64, 48, 48, 64), (301, 173, 80, 144)]

tensors = {}
for i, (w, h, bh, bw) in enumerate(CASES):
    y, x = np.mgrid[0:h, 0:w]
    smooth = np.stack([255 * x / (w - 1), 255 * y / (h - 1), 127.5 + 127.5 * np.sin(x / 5.0 + y / 7.0)], -1)
    pixels = np.clip(smooth + rng.normal(0, 30, smooth.shape), 0, 255).astype(np.uint8)
    image = Image.fromarray(pixels, "RGB")
    image.save(os.path.join(out_dir, f"case{i}.png"))

    scale = max(bw / w, bh / h)
    resized = (round(h * scale), round(w * scale))
    image = TF.resize(image, resized, interpolation=InterpolationMode.BILINEAR)
    image = TF.center_crop(image, (bh, bw))
    expected = torch.from_numpy(np.array(image, dtype=np.float32) * (2 / 255) - 1).permute(2, 0, 1)
    tensors[f"case{i}.bucket"] = torch.tensor([bh, bw], dtype=torch.int64)
    tensors[f"case{i}.resized"] = torch.tensor(resized, dtype=torch.int64)
    tensors[f"case{i}.expected"] = expected.contiguous()

save_file(tensors, os.path.join(out_dir, "cases.safetensors"))
