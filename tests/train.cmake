# The training engine: one optimizer step against a plain PyTorch loop over transformers.
mm_oracle(train_parity)
mm_test(test_train_parity ORACLES train_parity)
# Compute-balanced data parallelism: the cost-balanced deal of a global batch to the ranks.
mm_test(test_cost_balancing)
# Qwen3.5's multi-token-prediction head: loading, export, refusals, targets, packing.
mm_test(test_qwen3_5_mtp ORACLES train_parity)
# mmtrain train end to end (needs the CLI and transformers for the export checks).
mm_test(test_train_run)
# What a new user hits on the command line: no data loss, usage errors, rank-0 summaries, refusals up front.
mm_test(test_cli_new_user)
# The model registry: families by their own keys, dispatch of every command, clear refusals.
mm_test(test_model_registry)
