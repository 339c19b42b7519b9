// Autoregressive generation for the Qwen-VL models with a KV cache: one prefill over the prompt (vision
// features spliced in), then one position per step. Positions continue from the prompt's last
// M-RoPE position + 1 on all three axes, as the reference's generate does.
#pragma once
#include <cstdint>
#include <vector>

#include "mm/models/qwen_vl/qwen_vl_model.h"

namespace mm {

struct GenerationConfig {
  int64_t max_new_tokens = 32;
  bool greedy = true;         // argmax; otherwise sample from the warped distribution
  double temperature = 1.0;   // sampling: logits / temperature (skipped at 1.0)
  double top_p = 1.0;         // sampling: nucleus filter after top-k (skipped at 1.0)
  int64_t top_k = 0;          // sampling: keep the k most likely tokens (0 = off)
  uint64_t seed = 0;          // sampling: seeds a private torch::Generator; same seed, same tokens
  std::vector<int64_t> stop_token_ids;  // in addition to the model's eos ids

  void validate() const;
};

// The new tokens of every row (a row ends after its first stop token, which is included, or
// after max_new_tokens). inputs.input_ids: [batch, seq]; left padding via attention_mask.
std::vector<std::vector<int64_t>> generate_batch(QwenVLForConditionalGeneration& model,
                                                 const QwenVLInputs& inputs,
                                                 const GenerationConfig& config);

// generate_batch for a single sequence (batch 1).
std::vector<int64_t> generate(QwenVLForConditionalGeneration& model, const QwenVLInputs& inputs,
                              const GenerationConfig& config);

// The reference's logits warpers in its order: temperature, top-k, top-p. Removed tokens get
// -inf. logits: [batch, vocab] fp32 -> [batch, vocab].
torch::Tensor warp_logits(const torch::Tensor& logits, const GenerationConfig& config);

}  // namespace mm
