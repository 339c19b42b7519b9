# Diffusion schedulers and samplers: parity with diffusers.
mm_oracle(flow_match_euler)
mm_test(test_flow_match_euler ORACLES flow_match_euler)
mm_oracle(unipc_multistep)
mm_test(test_unipc ORACLES unipc_multistep)
mm_oracle(flow_matching_objective)
mm_test(test_flow_matching_objective ORACLES flow_matching_objective)
