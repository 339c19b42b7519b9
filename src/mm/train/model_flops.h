// Model FLOPs of a training step, by documented formulas, for model FLOPs utilisation (MFU =
// model FLOPs / step time / the device's peak). Counted as the computation the model defines
// (not what recomputation or padding adds): every multiply-accumulate of a matmul is 2 FLOPs
// forward and 4 backward (gradients of both operands), so a trained matmul costs 6 FLOPs per MAC.
// Attention costs its QK^T and AV products: 2 * width * s^2 MACs per segment of s tokens, half
// of that for causal attention. Norms, activations, rotary and softmax are left out (a few percent).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mm/models/qwen2/qwen2_text_config.h"

namespace mm {

struct QwenVLConfig;
struct WanTransformerConfig;

// A decoder-only transformer (Qwen2): `segments` are the lengths of the causal sequences of the
// step (one per sample, or the packed documents); `logit_tokens` the rows the LM head computes.
struct DecoderShape {
  int64_t layers = 0, hidden = 0, intermediate = 0, heads = 0, kv_heads = 0, vocab = 0;
  int64_t head_dim = 0;  // 0: hidden / heads (Qwen2); Qwen3's attention has a width of its own
};
double decoder_training_flops(const DecoderShape& shape, const std::vector<int64_t>& segments, int64_t logit_tokens);

// The Qwen decoder of `text` layer by layer, for what each layer is: attention (Qwen3.5's with its
// output gate doubling q_proj) or a Gated DeltaNet (its projections, its conv, and per token and
// value head 4 * key_head_dim * value_head_dim for the delta rule: the state's decay-and-read,
// delta, write and output products of the recurrent form); a dense MLP, or a sparse one's router,
// top-k experts and shared expert (the work a token does, not the parameters it could use). For a
// Qwen2 / Qwen3 config it equals decoder_training_flops.
double qwen_decoder_training_flops(const Qwen2TextConfig& text, const std::vector<int64_t>& segments,
                                   int64_t logit_tokens);

// Qwen3.5's multi-token-prediction head over the decoder's `segments`: per depth k its fc
// (2 * hidden -> hidden), one full-attention layer (sparse when the model has experts) and the LM
// head over that depth's `logit_tokens[k - 1]` rows.
double qwen_mtp_training_flops(const Qwen2TextConfig& text, const std::vector<int64_t>& segments,
                               const std::vector<int64_t>& logit_tokens);

// Qwen-VL: the decoder over `text_segments` plus the vision tower over `images` (t, h, w in
// patches). Qwen2.5-VL's tower attends within windows in most blocks and within whole frames in
// the fullatt_block_indexes blocks; Qwen2-VL's and Qwen3-VL's within whole frames in every block
// (Qwen3-VL adds a merger per DeepStack layer).
double qwen_vl_training_flops(const QwenVLConfig& config, const std::vector<int64_t>& text_segments,
                              int64_t logit_tokens, const std::vector<std::vector<int64_t>>& images);

// The Wan DiT on `samples` latent videos of `tokens` patches each, with `text_tokens` prompt tokens
// and, for an image-conditioned DiT (image_dim), `image_tokens` CLIP tokens per sample (their
// embedding MLP, each block's image keys and values, and the attention products to them).
double wan_dit_training_flops(const WanTransformerConfig& config, int64_t samples, int64_t tokens, int64_t text_tokens,
                              int64_t image_tokens = 0);

// Dense bf16 peak FLOP/s of a GPU from its name ("NVIDIA H200" ...), 0 when unknown: a run config
// or the command line gives it then.
double peak_bf16_flops(const std::string& device_name);

}  // namespace mm
