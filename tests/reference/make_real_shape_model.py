"""Makes a Qwen2.5-VL model directory with the published Qwen2.5-VL-3B-Instruct tensor shapes
(text hidden 2048, 16 heads / 2 KV heads, MLP 11008, vocabulary 151936, tied embeddings; the full
32-block vision tower, hidden 1280, MLP 3420, window 112, full attention at 7/15/23/31), truncated
to 4 decoder layers: 1.29B parameters, written in bf16 as two safetensors shards, as a user
downloads it. Random weights, the tokenizer the tokenizer oracle trains, default Qwen2-VL
processors, and a 448x336 test photo (smooth gradients and shapes, not noise).
Usage: make_real_shape_model.py OUT_DIR TOKENIZER_DIR"""
import os, sys

import numpy as np
import torch
from PIL import Image, ImageDraw
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

from qwen_vl_model_dir import start_model_dir

out, tok_dir = sys.argv[1], sys.argv[2]
tokenizer, special = start_model_dir(out, tok_dir)
ids = tokenizer.convert_tokens_to_ids
config = Qwen2_5_VLConfig(
    text_config=dict(vocab_size=151936, hidden_size=2048, intermediate_size=11008, num_hidden_layers=4,
                     num_attention_heads=16, num_key_value_heads=2, max_position_embeddings=128000,
                     rms_norm_eps=1e-6, tie_word_embeddings=True,
                     rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]},
                     eos_token_id=ids("<|im_end|>")),
    vision_config=dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=2048,
                       window_size=112, fullatt_block_indexes=[7, 15, 23, 31], tokens_per_second=2),
    tie_word_embeddings=True,
    **special)
# Built in bf16 directly (a fp32 build would need 5 GB more); initialised as transformers does.
torch.set_default_dtype(torch.bfloat16)
model = Qwen2_5_VLForConditionalGeneration(config)
torch.set_default_dtype(torch.float32)
model.generation_config.eos_token_id = ids("<|im_end|>")
model.save_pretrained(out, max_shard_size="1500MB")
print(sum(p.numel() for p in model.parameters()), "parameters")

# A photo-like image: sky gradient, ground, sun, a house.
width, height = 448, 336
y, x = np.mgrid[0:height, 0:width]
sky = np.stack([90 + 80 * y / height, 140 + 60 * y / height, 230 - 40 * y / height], -1)
ground = np.stack([60 + 40 * x / width, 140 - 30 * y / height, 50 + 0 * x], -1)
pixels = np.where((y > height * 0.62)[..., None], ground, sky).astype(np.uint8)
image = Image.fromarray(pixels)
draw = ImageDraw.Draw(image)
draw.ellipse([330, 30, 400, 100], fill=(250, 220, 90))
draw.rectangle([120, 150, 260, 250], fill=(180, 70, 60))
draw.polygon([(105, 150), (190, 90), (275, 150)], fill=(110, 60, 50))
draw.rectangle([175, 195, 205, 250], fill=(70, 50, 40))
image.save(os.path.join(out, "photo.png"))
