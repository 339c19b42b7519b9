"""Makes the benchmark's "small" Qwen2.5-VL model directory (random weights, the tokenizer the
tokenizer oracle trains, default Qwen2-VL processors) and a 224x224 test image.
Usage: make_bench_model.py OUT_DIR TOKENIZER_DIR"""
import os, sys

import numpy as np
from PIL import Image
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

from qwen_vl_model_dir import start_model_dir

out, tok_dir = sys.argv[1], sys.argv[2]
tokenizer, special = start_model_dir(out, tok_dir)
ids = tokenizer.convert_tokens_to_ids
config = Qwen2_5_VLConfig(
    text_config=dict(vocab_size=len(tokenizer), hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
                     num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=4096,
                     rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [8, 12, 12]},
                     eos_token_id=ids("<|im_end|>")),
    vision_config=dict(depth=8, hidden_size=256, intermediate_size=512, num_heads=4, out_hidden_size=512,
                       window_size=112, fullatt_block_indexes=[3, 7]),
    **special)
model = Qwen2_5_VLForConditionalGeneration(config)
model.generation_config.eos_token_id = ids("<|im_end|>")
model.save_pretrained(out)
rng = np.random.default_rng(0)
Image.fromarray(rng.integers(0, 255, (224, 224, 3), dtype=np.uint8)).save(os.path.join(out, "bench.png"))
