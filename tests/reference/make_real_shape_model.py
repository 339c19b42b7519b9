"""Makes a Qwen2.5-VL model directory with the published Qwen2.5-VL-3B-Instruct tensor shapes
(real_shape_qwen2_5_vl.py: 4 decoder layers, 1.29B parameters), written in bf16 as two
safetensors shards, as a user downloads it. Random weights, the tokenizer the tokenizer oracle trains, default Qwen2-VL
processors, and a 448x336 test photo (smooth gradients and shapes, not noise).
Usage: make_real_shape_model.py OUT_DIR TOKENIZER_DIR"""
import os, sys

import torch
from transformers import Qwen2_5_VLForConditionalGeneration

import real_shape_qwen2_5_vl
from qwen_vl_model_dir import start_model_dir

out, tok_dir = sys.argv[1], sys.argv[2]
tokenizer, special = start_model_dir(out, tok_dir)
ids = tokenizer.convert_tokens_to_ids
config = real_shape_qwen2_5_vl.config(eos_token_id=ids("<|im_end|>"), **special)
# Built in bf16 directly (a fp32 build would need 5 GB more); initialised as transformers does.
torch.set_default_dtype(torch.bfloat16)
model = Qwen2_5_VLForConditionalGeneration(config)
torch.set_default_dtype(torch.float32)
model.generation_config.eos_token_id = ids("<|im_end|>")
model.save_pretrained(out, max_shard_size="1500MB")
print(sum(p.numel() for p in model.parameters()), "parameters")
real_shape_qwen2_5_vl.photo().save(os.path.join(out, "photo.png"))
