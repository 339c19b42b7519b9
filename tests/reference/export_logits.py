"""Oracle run by test_train_run: transformers loads an exported Qwen2.5-VL, Qwen2-VL, Qwen3-VL, Qwen3-VL-MoE or Qwen3.5 directory
and computes logits for one image question, prepared by its own AutoProcessor.

usage: export_logits.py MODEL_DIR IMAGE OUT.safetensors
Writes input_ids, attention_mask, pixel_values, image_grid_thw and logits [1, seq, vocab] (fp32).
Fails if loading reports missing or unexpected weights.
"""
import json, os, sys

import torch
from PIL import Image
from safetensors.torch import save_file
from transformers import (AutoProcessor, Qwen2_5_VLForConditionalGeneration, Qwen2VLForConditionalGeneration,
                          Qwen3_5ForConditionalGeneration, Qwen3VLForConditionalGeneration,
                          Qwen3VLMoeForConditionalGeneration)

model_dir, image_path, out = sys.argv[1:4]
torch.set_num_threads(1)
with open(os.path.join(model_dir, "config.json")) as f:
    model_type = json.load(f)["model_type"]
model_class = {"qwen2_5_vl": Qwen2_5_VLForConditionalGeneration, "qwen2_vl": Qwen2VLForConditionalGeneration,
               "qwen3_vl": Qwen3VLForConditionalGeneration, "qwen3_vl_moe": Qwen3VLMoeForConditionalGeneration,
               "qwen3_5": Qwen3_5ForConditionalGeneration}[model_type]
model, info = model_class.from_pretrained(model_dir, dtype=torch.float32, output_loading_info=True)
problems = {k: v for k, v in info.items() if v}
if problems:
    sys.exit(f"transformers reports loading problems for {model_dir}: {problems}")
processor = AutoProcessor.from_pretrained(model_dir)
messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What color is the shape?"}]}]
text = processor.apply_chat_template(messages, add_generation_prompt=True)
inputs = processor(text=[text], images=[Image.open(image_path).convert("RGB")], return_tensors="pt")
with torch.no_grad():
    logits = model(**inputs).logits.float()
save_file({"input_ids": inputs["input_ids"].contiguous(), "attention_mask": inputs["attention_mask"].contiguous(),
           "pixel_values": inputs["pixel_values"].contiguous(), "image_grid_thw": inputs["image_grid_thw"].contiguous(),
           "logits": logits.contiguous()}, out)
