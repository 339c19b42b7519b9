# Vision encoders: parity with the transformers implementations.
mm_oracle(qwen2_5_vl_vision)
mm_test(test_qwen2_5_vl_vision ORACLES qwen2_5_vl_vision)
mm_oracle(clip_vision)
mm_test(test_clip_vision ORACLES clip_vision)
mm_oracle(qwen2_vl_vision)
mm_test(test_qwen2_vl_vision ORACLES qwen2_vl_vision)
mm_oracle(qwen3_vl_vision)
mm_test(test_qwen3_vl_vision ORACLES qwen3_vl_vision)
