# Qwen2.5-VL language side and the assembled model: parity with transformers (logits, positions,
# greedy generation), checkpoint layouts, broken inputs, sampling.
mm_oracle(qwen2_5_vl_model)
mm_test(test_qwen2_5_vl_model ORACLES qwen2_5_vl_model)
mm_test(test_generation ORACLES qwen2_5_vl_model)
# Qwen2-VL, the same engine with another vision tower: parity with transformers.
mm_oracle(qwen2_vl_model)
mm_test(test_qwen2_vl_model ORACLES qwen2_vl_model)
