"""Makes the benchmark's "small" Qwen3-VL model directory: the widths of make_bench_model.py's
Qwen2.5-VL (decoder 8 x 512 with 8 heads of 64, vision tower 8 x 256) with Qwen3-VL's parts
(16-pixel patches, a 16 x 16 learned position table, DeepStack after vision blocks 1, 3 and 5,
q/k norms, interleaved M-RoPE), random weights, the tokenizer the tokenizer oracle trains and
Qwen3-VL's image (16-pixel patches) and video processors. With `moe`, the Qwen3-VL-MoE model of
the same widths: every decoder layer sparse, 8 experts of width 192, top 2 (the ratios of
Qwen3-VL-30B-A3B: 128 experts of 768 over a 2048 hidden, top 8). With `qwen3_5`, the Qwen3.5 model
of the same widths: the tower without DeepStack and the hybrid decoder (Gated DeltaNet layers with
4 key / 8 value heads of 64 and a conv of 4, every fourth layer gated attention with quarter rotary:
Qwen3.5-9B's ratios at this width).
Usage: make_bench_model_qwen3_vl.py OUT_DIR TOKENIZER_DIR [moe | qwen3_5]"""
import os, sys

import torch
from transformers import (AutoTokenizer, Qwen2VLImageProcessor, Qwen3_5Config, Qwen3_5ForConditionalGeneration,
                          Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLMoeConfig,
                          Qwen3VLMoeForConditionalGeneration, Qwen3VLProcessor, Qwen3VLVideoProcessor)

from qwen3_vl_chat_template import QWEN3_VL_INSTRUCT_TEMPLATE

out, tok_dir = sys.argv[1], sys.argv[2]
variant = sys.argv[3] if len(sys.argv) > 3 else ""
moe, hybrid = variant == "moe", variant == "qwen3_5"
os.makedirs(out, exist_ok=True)
torch.manual_seed(0)
tokenizer = AutoTokenizer.from_pretrained(tok_dir)
half = [0.5, 0.5, 0.5]
Qwen3VLProcessor(image_processor=Qwen2VLImageProcessor(patch_size=16, image_mean=half, image_std=half),
                 tokenizer=tokenizer, video_processor=Qwen3VLVideoProcessor(),
                 chat_template=QWEN3_VL_INSTRUCT_TEMPLATE).save_pretrained(out)
ids = tokenizer.convert_tokens_to_ids
# The text options beyond the shared widths: MoE's experts or Qwen3.5's DeltaNet layers.
variant_options = (dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=192, decoder_sparse_step=1)
                   if moe else {})
rope = {"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [12, 10, 10], "mrope_interleaved": True}
if hybrid:
    variant_options = dict(linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=64,
                           linear_value_head_dim=64, linear_conv_kernel_dim=4)
    rope = dict(rope, mrope_section=[3, 3, 2], partial_rotary_factor=0.25)  # 16 of 64 dims turn
vision = dict(depth=8, hidden_size=256, intermediate_size=512, num_heads=4, out_hidden_size=512, patch_size=16,
              num_position_embeddings=256)
if not hybrid:
    vision["deepstack_visual_indexes"] = [1, 3, 5]
config_class, model_class = ((Qwen3_5Config, Qwen3_5ForConditionalGeneration) if hybrid
                             else (Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration) if moe
                             else (Qwen3VLConfig, Qwen3VLForConditionalGeneration))
config = config_class(
    text_config=dict(**variant_options, vocab_size=len(tokenizer), hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
                     num_attention_heads=8, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096,
                     rope_parameters=rope, eos_token_id=ids("<|im_end|>")),
    vision_config=vision,
    image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
    vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"))
model = model_class(config)
model.generation_config.eos_token_id = ids("<|im_end|>")
model.save_pretrained(out)
