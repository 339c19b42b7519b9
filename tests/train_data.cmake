# Training data: conversation records, sample encoding (against Qwen2_5_VLProcessor and
# get_rope_index), collation, sampler and the threaded loader.
mm_oracle(train_data)
# The oracle's model directory uses the tokenizer the tokenizer oracle trains.
set_tests_properties(oracle_train_data PROPERTIES FIXTURES_REQUIRED oracle_tokenizer_corpus)
mm_test(test_train_data ORACLES train_data)
mm_test(test_global_cursor)
