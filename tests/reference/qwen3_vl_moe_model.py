"""Oracle: tiny random Qwen3-VL-MoE models, their logits and greedy generations (qwen_vl_model.py)."""
import sys

from qwen_vl_model import main

main("qwen3_vl_moe", sys.argv[1])
