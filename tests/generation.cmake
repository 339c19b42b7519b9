# Generation pipelines: whole samples against diffusers' pipelines.
mm_oracle(wan_pipeline)
mm_test(test_wan_pipeline ORACLES wan_pipeline)
mm_test(test_video_train_run ORACLES wan_pipeline)
mm_oracle(wan_i2v_pipeline)
mm_test(test_wan_i2v_pipeline ORACLES wan_i2v_pipeline)
mm_test(test_video_i2v_train_run ORACLES wan_i2v_pipeline wan_pipeline)
