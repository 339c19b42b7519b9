# Generation pipelines: whole samples against diffusers' pipelines.
mm_oracle(wan_pipeline)
mm_test(test_wan_pipeline ORACLES wan_pipeline)
