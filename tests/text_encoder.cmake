# Text encoders of the generation models: parity with the transformers implementations.
mm_oracle(umt5_encoder)
mm_test(test_umt5_encoder ORACLES umt5_encoder)
