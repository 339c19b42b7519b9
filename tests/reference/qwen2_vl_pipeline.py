"""Oracle: the whole Qwen2-VL chat pipeline as a transformers user runs it (qwen_vl_pipeline.py).

Usage: qwen2_vl_pipeline.py OUT_DIR [TOKENIZER_DIR]
"""
import sys

from qwen_vl_pipeline import main

main("qwen2_vl", sys.argv)
