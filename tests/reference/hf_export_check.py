"""Oracle for the HF export test: transformers loads an mmtrain export and runs it.

usage: hf_export_check.py EXPORT_DIR INPUTS.safetensors OUT_DIR
  EXPORT_DIR         written by mm::export_hf
  INPUTS.safetensors input_ids [1, S], pixel_values, image_grid_thw (written by the C++ test)
Writes OUT_DIR/logits.safetensors (logits [1, S, V] fp32 from
Qwen2_5_VLForConditionalGeneration.from_pretrained(EXPORT_DIR)) and OUT_DIR/loading_info.json
(missing / unexpected / mismatched keys and error messages as from_pretrained reports them).
"""
import json, os, sys

import torch
from safetensors.torch import load_file, save_file
from transformers import Qwen2_5_VLForConditionalGeneration

export_dir, inputs_path, out = sys.argv[1:4]
os.makedirs(out, exist_ok=True)
torch.set_num_threads(1)

model, info = Qwen2_5_VLForConditionalGeneration.from_pretrained(
    export_dir, dtype=torch.float32, output_loading_info=True)
model.eval()
inputs = load_file(inputs_path)
cfg = model.config
ids = inputs["input_ids"]
kwargs = dict(input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=inputs["pixel_values"],
              image_grid_thw=inputs["image_grid_thw"],
              mm_token_type_ids=(ids == cfg.image_token_id).int() + 2 * (ids == cfg.video_token_id).int())
with torch.no_grad():
    logits = model(**kwargs).logits.float().contiguous()
save_file({"logits": logits}, os.path.join(out, "logits.safetensors"))
with open(os.path.join(out, "loading_info.json"), "w") as f:
    json.dump({k: sorted(str(x) for x in v) for k, v in info.items()}, f)
