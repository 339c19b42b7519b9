# The whole chat pipeline and `mmtrain infer` against AutoProcessor + generate, per Qwen-VL family.
mm_oracle(qwen2_5_vl_pipeline)
mm_oracle(qwen2_vl_pipeline)
mm_oracle(qwen3_vl_pipeline)
mm_oracle(qwen3_5_pipeline)
# The pipelines' model directories use the tokenizer the tokenizer oracle trains.
set_tests_properties(oracle_qwen2_5_vl_pipeline oracle_qwen2_vl_pipeline oracle_qwen3_vl_pipeline oracle_qwen3_5_pipeline PROPERTIES FIXTURES_REQUIRED oracle_tokenizer_corpus)
mm_test(test_vlm_chat ORACLES qwen2_5_vl_pipeline qwen2_vl_pipeline qwen3_vl_pipeline qwen3_5_pipeline)
