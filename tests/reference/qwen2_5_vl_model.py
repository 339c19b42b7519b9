"""Oracle: tiny random Qwen2.5-VL models, their logits and greedy generations (qwen_vl_model.py)."""
import sys

from qwen_vl_model import main

main("qwen2_5_vl", sys.argv[1])
