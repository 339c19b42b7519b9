// The parity checks the Qwen-VL model tests share (Qwen2-VL, Qwen3-VL, Qwen3-VL-MoE, Qwen3.5,
// Qwen3.5-MoE, and parts of Qwen2.5-VL's): every case of an oracle's goldens against transformers'
// positions, logits, greedy tokens,
// and an export that writes back exactly what transformers saved.
#pragma once
#include <algorithm>
#include <iostream>
#include <string>

#include "mm/models/qwen_vl/qwen_vl_hf_export.h"
#include "mm/tasks/generation.h"
#include "model_cases.h"

namespace mm::testing {

// Logits at real tokens only (padding positions carry no meaning): [tokens, vocab].
inline torch::Tensor real_positions(const torch::Tensor& logits, const QwenVLInputs& in) {
  if (!in.attention_mask.defined()) return logits.reshape({-1, logits.size(-1)});
  return logits.index({in.attention_mask.to(torch::kBool)});
}

// Every case's M-RoPE positions and deltas exactly the oracle's (transformers' get_rope_index).
inline void expect_positions_match(QwenVLForConditionalGenerationImpl& model, const SafetensorsFile& cases) {
  for (const auto& c : kCases) {
    const auto rope = model.get_rope_index(inputs_of(cases, c));
    EXPECT_TRUE(torch::equal(rope.position_ids, field(cases, c, "position_ids"))) << c;
    EXPECT_TRUE(torch::equal(rope.deltas, field(cases, c, "rope_deltas"))) << c;
  }
}

// Every case's logits within 1e-4 of the oracle's; `label` names the model in the printed diffs.
inline void expect_logits_match(QwenVLForConditionalGenerationImpl& model, const SafetensorsFile& cases,
                                const std::string& label) {
  torch::NoGradGuard no_grad;
  for (const auto& c : kCases) {
    const auto in = inputs_of(cases, c);
    const double diff = max_abs_diff(real_positions(model.forward(in), in), real_positions(field(cases, c, "logits"), in));
    std::cout << "[ max diff ] " << label << ", " << c << ": " << diff << std::endl;
    EXPECT_LE(diff, 1e-4) << c;
  }
}

inline std::vector<int64_t> token_row(const torch::Tensor& t, int64_t r) {
  auto x = t[r].to(torch::kInt64).contiguous();
  return {x.data_ptr<int64_t>(), x.data_ptr<int64_t>() + x.numel()};
}

// Every case's 32 greedy tokens (each row of a batch) equal to the oracle's.
inline void expect_greedy_tokens_match(QwenVLForConditionalGeneration& model, const SafetensorsFile& cases) {
  GenerationConfig config;
  config.max_new_tokens = 32;
  for (const auto& c : kCases) {
    const auto expected = field(cases, c, "generated");
    const auto got = generate_batch(model, inputs_of(cases, c), config);
    ASSERT_EQ(static_cast<int64_t>(got.size()), expected.size(0)) << c;
    for (int64_t r = 0; r < expected.size(0); ++r) EXPECT_EQ(got[r], token_row(expected, r)) << c << " row " << r;
  }
}

// export_hf of `model` (loaded from `source_dir`) into `out` writes exactly the names and tensors
// transformers saved in `source_dir`, and reloads as `model_type` with the same logits on `c`.
inline void expect_export_writes_the_source(QwenVLForConditionalGeneration& model,
                                            const std::filesystem::path& source_dir, const std::filesystem::path& out,
                                            const SafetensorsFile& cases, const std::string& model_type,
                                            const std::string& c = "image_video") {
  std::filesystem::remove_all(out);
  export_hf(model, source_dir, out);
  const auto source = Checkpoint::open(source_dir);
  const auto exported = Checkpoint::open(out);
  auto names = exported.names();
  auto expected = source.names();
  std::sort(names.begin(), names.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(names, expected);
  for (const auto& name : expected) EXPECT_TRUE(torch::equal(exported.tensor(name), source.tensor(name))) << name;
  auto reloaded = QwenVLForConditionalGenerationImpl::from_pretrained(out);
  EXPECT_EQ(reloaded->config().model_type(), model_type);
  torch::NoGradGuard no_grad;
  const auto in = inputs_of(cases, c);
  EXPECT_TRUE(torch::equal(reloaded->forward(in), model->forward(in)));
  std::filesystem::remove_all(out);
}

}  // namespace mm::testing
