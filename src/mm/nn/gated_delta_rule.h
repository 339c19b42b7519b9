// The gated delta rule, the recurrence of Gated DeltaNet's linear attention (Yang et al. 2024;
// Qwen3-Next and Qwen3.5's linear-attention layers), in three forms with one meaning:
//   S_t = exp(g_t) S_{t-1} + k_t (beta_t (v_t - (exp(g_t) S_{t-1})^T k_t))^T,   o_t = S_t^T q_t
// with a state S of [key_dim, value_dim] per head.
//   - chunked: the training and prefill form (WY/UT transform inside a chunk, the state carried
//     from chunk to chunk), as transformers' torch_chunk_gated_delta_rule computes it;
//   - recurrent: one token at a time, the decode form (torch_recurrent_gated_delta_rule);
//   - varlen: a packed row of several samples, the state restarting at zero at every sample
//     start (cu_seqlens), so a packed row gives what its samples give one by one.
// All three are plain torch ops, so autograd differentiates them; they compute in fp32 (fp64 inputs
// in fp64, nn/compute_dtype.h).
//
// Inputs are the layer's prepared tensors (gated_delta_net.h): q and k L2-normalised, q already
// scaled by 1/sqrt(key_dim), key heads repeated up to the value heads.
//   q, k: [batch, seq, heads, key_dim]   v: [batch, seq, heads, value_dim]
//   g:    [batch, seq, heads]  the log of the per-token decay (<= 0)
//   beta: [batch, seq, heads]  the delta rule's write strength in (0, 1)
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace mm {

struct DeltaRuleOutput {
  torch::Tensor out;    // [batch, seq, heads, value_dim], fp32 (or fp64)
  torch::Tensor state;  // [batch, heads, key_dim, value_dim], fp32 (or fp64): the state after the last token
};

// `initial_state` [batch, heads, key_dim, value_dim] or undefined (zeros). The sequence is
// zero-padded to a multiple of chunk_size; padding changes neither outputs nor the state.
DeltaRuleOutput gated_delta_rule_chunked(const torch::Tensor& q, const torch::Tensor& k,
                                         const torch::Tensor& v, const torch::Tensor& g,
                                         const torch::Tensor& beta, int64_t chunk_size,
                                         const torch::Tensor& initial_state = {});

DeltaRuleOutput gated_delta_rule_recurrent(const torch::Tensor& q, const torch::Tensor& k,
                                           const torch::Tensor& v, const torch::Tensor& g,
                                           const torch::Tensor& beta,
                                           const torch::Tensor& initial_state = {});

// Throws, naming `who`, unless cu_seqlens rises (never falls) from 0 to `seq`: the packed-row
// boundaries that the layer's conv window and the rule below both restart at.
void check_cu_seqlens(const std::vector<int64_t>& cu_seqlens, int64_t seq, const std::string& who);

// A packed row: batch 1, cu_seqlens the samples' boundaries rising from 0 to seq (empty samples
// allowed; anything else throws). Every sample is chunked on its own (padded to a multiple of
// chunk_size); all chunks of all samples go through one batched intra-chunk computation, and the
// state, zero at each sample's start, is carried by chunk position: step j advances every sample's
// j-th chunk at once, so the sequential steps are the longest sample's chunks, not all samples'.
// `state` is [samples, heads, key_dim, value_dim]: each sample's final one.
DeltaRuleOutput gated_delta_rule_varlen(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, const torch::Tensor& g,
                                        const torch::Tensor& beta, const std::vector<int64_t>& cu_seqlens,
                                        int64_t chunk_size);

}  // namespace mm
