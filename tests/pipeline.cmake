# The whole chat pipeline and `mmtrain infer` against AutoProcessor + generate.
mm_oracle(qwen2_5_vl_pipeline)
# The pipeline's model directory uses the tokenizer the tokenizer oracle trains.
set_tests_properties(oracle_qwen2_5_vl_pipeline PROPERTIES FIXTURES_REQUIRED oracle_tokenizer_corpus)
mm_test(test_vlm_chat ORACLES qwen2_5_vl_pipeline)
