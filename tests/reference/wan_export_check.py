"""Check: a Wan training checkpoint exported by `mmtrain export` / `mmtrain convert` is a diffusers
pipeline directory that diffusers itself loads, and its transformer computes what the trained
weights compute.

Usage: wan_export_check.py EXPORT_DIR TRAINED_WEIGHTS.safetensors
Loads WanPipeline.from_pretrained(EXPORT_DIR) (the transformer built from its config and loaded
strictly, as from_pretrained does with accelerate, absent here), builds a second
WanTransformer3DModel from the same config with TRAINED_WEIGHTS loaded strictly, runs both on one
seeded input and requires equal outputs; loads transformer_ema/ too when the export has it.
Prints "max abs difference: X" and exits 1 on any mismatch.
"""
import os, sys

import torch
from diffusers import WanPipeline, WanTransformer3DModel
from diffusers.utils import logging as diffusers_logging
from safetensors.torch import load_file

torch.set_num_threads(1)
diffusers_logging.set_verbosity_error()
export_dir, weights = sys.argv[1], sys.argv[2]



def transformer_from(folder, weights_file):
    # from_pretrained refuses WanTransformer3DModel without accelerate (absent here): build it from
    # its saved config and load the weights strictly, which is what it would do.
    model = WanTransformer3DModel.from_config(WanTransformer3DModel.load_config(folder)).eval()
    model.load_state_dict(load_file(weights_file), strict=True)
    return model


exported = transformer_from(os.path.join(export_dir, "transformer"),
                            os.path.join(export_dir, "transformer", "diffusion_pytorch_model.safetensors"))
# Every other component as diffusers loads it from the directory.
pipe = WanPipeline.from_pretrained(export_dir, transformer=exported)
assert pipe.vae is not None and pipe.text_encoder is not None and pipe.tokenizer is not None
trained = transformer_from(os.path.join(export_dir, "transformer"), weights)

cfg = exported.config
g = torch.Generator().manual_seed(0)
p_t, p_h, p_w = cfg.patch_size
x = torch.randn(1, cfg.in_channels, 2 * p_t, 4 * p_h, 4 * p_w, generator=g)
text = torch.randn(1, 5, cfg.text_dim, generator=g)
t = torch.tensor([437.0])
with torch.no_grad():
    a = exported(x, t, text, return_dict=False)[0]
    b = trained(x, t, text, return_dict=False)[0]
diff = (a - b).abs().max().item()
print(f"max abs difference: {diff}")
if not torch.equal(a, b):
    sys.exit(1)
if os.path.isdir(os.path.join(export_dir, "transformer_ema")):
    ema_dir = os.path.join(export_dir, "transformer_ema")
    transformer_from(ema_dir, os.path.join(ema_dir, "diffusion_pytorch_model.safetensors"))
    print("transformer_ema loads")
