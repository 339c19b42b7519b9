"""Oracle: the whole Qwen3.5 chat pipeline as a transformers user runs it (qwen_vl_pipeline.py).

Usage: qwen3_5_pipeline.py OUT_DIR [TOKENIZER_DIR]
"""
import sys

from qwen_vl_pipeline import main

main("qwen3_5", sys.argv)
