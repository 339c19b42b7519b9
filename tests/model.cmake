# Qwen2.5-VL language side and the assembled model: parity with transformers (logits, positions,
# greedy generation), checkpoint layouts, broken inputs, sampling.
mm_oracle(qwen2_5_vl_model)
mm_test(test_qwen2_5_vl_model ORACLES qwen2_5_vl_model)
mm_test(test_generation ORACLES qwen2_5_vl_model)
# Qwen2-VL, the same engine with another vision tower: parity with transformers.
mm_oracle(qwen2_vl_model)
mm_test(test_qwen2_vl_model ORACLES qwen2_vl_model)
# Qwen3 and Qwen3-MoE causal LMs on the shared Qwen decoder and MoE block: logits, router logits,
# aux loss, loss, gradients and greedy tokens against transformers; packed rows equal lone samples.
mm_oracle(qwen3_text)
mm_test(test_qwen3_text ORACLES qwen3_text)
# Qwen3-VL: its vision tower with DeepStack, the Qwen3 decoder with interleaved M-RoPE, video
# frames apart: positions, logits, greedy tokens, bf16 and the export against transformers.
mm_oracle(qwen3_vl_model)
mm_test(test_qwen3_vl_model ORACLES qwen3_vl_model)
# Qwen3-VL-MoE: sparse decoder layers, experts fused in the checkpoints (both layouts).
mm_oracle(qwen3_vl_moe_model)
mm_test(test_qwen3_vl_moe_model ORACLES qwen3_vl_moe_model)
# Gated DeltaNet, Qwen3.5's linear-attention layer: forward, gradients, masked rows, cached
# decode and packed rows against transformers; the chunked, recurrent and varlen forms agree.
mm_oracle(gated_delta_net)
mm_test(test_gated_delta_net ORACLES gated_delta_net)
# Qwen3.5's hybrid decoder (Gated DeltaNet and gated-attention layers from layer_types) as a
# causal LM: logits, loss, gradients, 32 greedy tokens through both caches against transformers;
# a packed row's losses and gradients equal its samples' alone.
mm_oracle(qwen3_5_text)
mm_test(test_qwen3_5_text ORACLES qwen3_5_text)
# Qwen3.5, the natively multimodal hybrid: Qwen3-VL's tower without DeepStack before the hybrid
# decoder: positions, logits, 32 greedy tokens through both caches, bf16, export, MTP head skipped.
mm_oracle(qwen3_5_model)
mm_test(test_qwen3_5_model ORACLES qwen3_5_model)
# Qwen3.5-MoE: every hybrid layer sparse with a gated shared expert; both expert layouts.
mm_oracle(qwen3_5_moe_model)
mm_test(test_qwen3_5_moe_model ORACLES qwen3_5_moe_model)
