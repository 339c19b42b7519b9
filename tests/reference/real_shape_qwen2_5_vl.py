"""The real-shape Qwen2.5-VL of the loading and bf16-fidelity benchmarks: the published
Qwen2.5-VL-3B-Instruct tensor shapes (text hidden 2048, 16 heads / 2 KV heads, MLP 11008,
vocabulary 151936, tied embeddings; the full 32-block vision tower, hidden 1280, MLP 3420, window
112, full attention at 7/15/23/31), truncated to 4 decoder layers (1.29B parameters), and its
448x336 test photo (smooth gradients and shapes, not noise). Used by make_real_shape_model.py (CPU
bench) and bench/gpu_fidelity.py (the GPU check)."""
import numpy as np
from PIL import Image, ImageDraw
from transformers import Qwen2_5_VLConfig


def config(eos_token_id=None, **special):
    """special: image/video/vision start/end token ids (the defaults of Qwen2_5_VLConfig otherwise)."""
    return Qwen2_5_VLConfig(
        text_config=dict(vocab_size=151936, hidden_size=2048, intermediate_size=11008, num_hidden_layers=4,
                         num_attention_heads=16, num_key_value_heads=2, max_position_embeddings=128000,
                         rms_norm_eps=1e-6, tie_word_embeddings=True,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                          "mrope_section": [16, 24, 24]},
                         eos_token_id=eos_token_id),
        vision_config=dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=2048,
                           window_size=112, fullatt_block_indexes=[7, 15, 23, 31], tokens_per_second=2),
        tie_word_embeddings=True,
        **special)


def photo():
    """A photo-like 448x336 image: sky gradient, ground, sun, a house."""
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
    return image
