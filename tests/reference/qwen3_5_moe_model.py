"""Oracle: tiny random Qwen3.5-MoE models (vision tower + hybrid decoder with sparse layers), their logits and greedy
generations (qwen_vl_model.py)."""
import sys

from qwen_vl_model import main

main("qwen3_5_moe", sys.argv[1])
