# Diffusion transformers (predictors) of the generation models: parity with diffusers.
mm_oracle(wan_transformer)
mm_test(test_wan_transformer ORACLES wan_transformer)
