"""Oracle: the whole Qwen2.5-VL chat pipeline as a transformers user runs it (qwen_vl_pipeline.py).

Usage: qwen2_5_vl_pipeline.py OUT_DIR [TOKENIZER_DIR]
"""
import sys

from qwen_vl_pipeline import main

main("qwen2_5_vl", sys.argv)
