"""Oracle: the whole Qwen3-VL chat pipeline as a transformers user runs it (qwen_vl_pipeline.py).

Usage: qwen3_vl_pipeline.py OUT_DIR [TOKENIZER_DIR]
"""
import sys

from qwen_vl_pipeline import main

main("qwen3_vl", sys.argv)
