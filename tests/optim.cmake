# Training engine pieces: optimizer, schedules, clipping, RNG, checkpoint files, metrics.
mm_oracle(optimizer)
mm_test(test_optimizer ORACLES optimizer)
mm_test(test_checkpoint_io)
mm_test(test_metrics)
# Model FLOPs formulas (MFU) against hand counts.
mm_test(test_model_flops)
