# Autoencoders of the generation models: parity with the diffusers implementations.
mm_oracle(wan_vae)
mm_test(test_wan_vae ORACLES wan_vae)
