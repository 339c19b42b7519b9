# Model-side training features: LoRA, activation recomputation, packed attention, random init and
# HF export (the export is checked by transformers loading it: tests/reference/hf_export_check.py,
# run by the test itself on the directory it just wrote).
mm_test(test_lora)
mm_test(test_load_balancing)
mm_test(test_recompute)
mm_test(test_packed_attention)
mm_test(test_hf_export)
