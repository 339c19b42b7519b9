# Distributed runtime: multi-process Gloo tests on CPU (each test spawns its own ranks).
mm_test(test_process_group)
mm_test(test_autograd_collectives)
# Ring and Ulysses attention on 2-4 Gloo ranks against SDPA over the whole sequence (fp64).
mm_test(test_context_parallel_attention)
# Gated DeltaNet head-parallel over 2 and 4 Gloo ranks against one process (fp64).
mm_test(test_gated_delta_net_context_parallel)
# The Wan DiT split over 2-4 Gloo ranks (Ulysses, ring, USP) against one process (fp64).
mm_test(test_wan_context_parallel)
# Qwen-VL trained with context parallelism (launched Gloo runs) against one process.
mm_test(test_vlm_context_parallel)
mm_test(test_expert_parallel)
mm_test(test_launcher)
mm_test(test_data_parallel)
mm_test(test_expert_parallel_training)
