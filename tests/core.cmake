mm_oracle(safetensors_files)
mm_test(test_safetensors ORACLES safetensors_files)
mm_test(test_config)
mm_test(test_layering)
