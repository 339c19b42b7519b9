"""Oracle: tiny random Qwen3.5 models (vision tower + hybrid decoder), their logits and greedy
generations (qwen_vl_model.py)."""
import sys

from qwen_vl_model import main

main("qwen3_5", sys.argv[1])
