"""Shared by the benchmark model makers (make_bench_model.py, make_real_shape_model.py): a model
directory started with its processor saved (the tokenizer the tokenizer oracle trains, default
Qwen2-VL image and video processors, the Qwen2-VL chat template) and the config's special token ids."""
import os

import torch
from transformers import AutoTokenizer, Qwen2_5_VLProcessor, Qwen2VLImageProcessor, Qwen2VLVideoProcessor

from qwen2_vl_chat_template import QWEN2_VL_CHAT_TEMPLATE


def start_model_dir(out, tok_dir):
    """-> (tokenizer, the config's image/video/vision start/end token id keywords); seeds torch."""
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    Qwen2_5_VLProcessor(image_processor=Qwen2VLImageProcessor(), tokenizer=tokenizer,
                        video_processor=Qwen2VLVideoProcessor(),
                        chat_template=QWEN2_VL_CHAT_TEMPLATE).save_pretrained(out)
    ids = tokenizer.convert_tokens_to_ids
    special = dict(image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
                   vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"))
    return tokenizer, special
