// Packed sequences (cu_seqlens): three samples with images of different lengths packed into one
// row give each sample's unpacked logits, and the same loss and parameter gradients.
#include <map>

#include "testing.h"
#include "tiny_qwen2_5_vl.h"

namespace mm::testing {
namespace {

struct Packed {
  QwenVLInputs inputs;      // input_ids [1, total], all images' pixels and grids in order
  torch::Tensor position_ids;   // [3, 1, total]: each sample's own positions side by side
  std::vector<int64_t> cu_seqlens;
};

Packed pack(QwenVLForConditionalGeneration& model, const std::vector<QwenVLInputs>& samples) {
  Packed p;
  std::vector<torch::Tensor> ids, pixels, grids, positions;
  p.cu_seqlens = {0};
  for (const auto& s : samples) {
    ids.push_back(s.input_ids);
    pixels.push_back(s.pixel_values);
    grids.push_back(s.image_grid_thw);
    positions.push_back(model->get_rope_index(s).position_ids);
    p.cu_seqlens.push_back(p.cu_seqlens.back() + s.input_ids.size(1));
  }
  p.inputs.input_ids = torch::cat(ids, 1);
  p.inputs.pixel_values = torch::cat(pixels, 0);
  p.inputs.image_grid_thw = torch::cat(grids, 0);
  p.position_ids = torch::cat(positions, 2);
  return p;
}

torch::Tensor packed_logits(QwenVLForConditionalGeneration& model, const Packed& p) {
  auto embeds = model->embed_inputs(p.inputs);
  return model->lm_logits(model->decode(embeds, p.position_ids, {}, nullptr, p.cu_seqlens));
}

std::vector<QwenVLInputs> three_samples() {
  const auto c = tiny_config();
  return {tiny_sample(c, 3, 4, 4, 9, 1), tiny_sample(c, 7, 4, 8, 2, 2), tiny_sample(c, 1, 8, 4, 14, 3)};
}

// The packed decoder attends through segments (linear memory), and that attention equals dense
// SDPA under the block-diagonal causal mask, with grouped-query heads and in fp64, on segments of
// equal and of different lengths, adjacent and scattered; the gradients too.
TEST(PackedAttention, SegmentsEqualABlockDiagonalCausalMask) {
  const auto mask = make_packed_causal_mask({0, 2, 5}, torch::kCPU);
  EXPECT_FALSE(mask.mask.defined()) << "no [seq, seq] mask for packed samples";
  ASSERT_TRUE(mask.segments);
  EXPECT_THROW_MSG(make_packed_causal_mask({0, 3, 3}, torch::kCPU), "increase strictly");
  EXPECT_THROW_MSG(make_packed_causal_mask({1, 3}, torch::kCPU), "start at 0");

  const std::vector<int64_t> cu = {0, 4, 7, 11, 12, 15, 19};  // lengths 4 3 4 1 3 4
  const int64_t seq = cu.back(), heads = 4, kv_heads = 2, head_dim = 8;
  torch::manual_seed(5);
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  auto q = torch::randn({seq, heads, head_dim}, opts).requires_grad_(true);
  auto k = torch::randn({seq, kv_heads, head_dim}, opts).requires_grad_(true);
  auto v = torch::randn({seq, kv_heads, head_dim}, opts).requires_grad_(true);
  const double scale = 0.3;
  const auto upstream = torch::randn({seq, heads, head_dim}, opts);

  const VarlenSegments segments(cu, torch::kCPU);
  const auto out = segments.attention(q, k, v, scale, /*causal=*/true);
  const auto grads = torch::autograd::grad({out}, {q, k, v}, {upstream});

  std::vector<int64_t> segment_of;
  for (size_t i = 1; i < cu.size(); ++i) segment_of.insert(segment_of.end(), cu[i] - cu[i - 1], static_cast<int64_t>(i));
  const auto seg = torch::tensor(segment_of);
  const auto pos = torch::arange(seq);
  const auto allowed = (seg.view({seq, 1}) == seg.view({1, seq})) & (pos.view({1, seq}) <= pos.view({seq, 1}));
  auto heads_first = [](const torch::Tensor& t) { return t.transpose(0, 1).unsqueeze(0); };
  const auto dense = at::scaled_dot_product_attention(heads_first(q), heads_first(k), heads_first(v),
                                                      allowed.view({1, 1, seq, seq}), 0.0, false, scale,
                                                      /*enable_gqa=*/true)[0]
                         .transpose(0, 1);
  const auto dense_grads = torch::autograd::grad({dense}, {q, k, v}, {upstream});
  EXPECT_LT(max_abs_diff(out, dense), 1e-12);
  for (size_t i = 0; i < 3; ++i) EXPECT_LT(max_abs_diff(grads[i], dense_grads[i]), 1e-12) << "gradient " << i;
  // Non-causal (the vision towers' windows) is the same mask without the triangle.
  const auto full = segments.attention(q, k, v, scale, /*causal=*/false);
  const auto dense_full = at::scaled_dot_product_attention(
      heads_first(q), heads_first(k), heads_first(v), (seg.view({seq, 1}) == seg.view({1, seq})).view({1, 1, seq, seq}),
      0.0, false, scale, /*enable_gqa=*/true)[0].transpose(0, 1);
  EXPECT_LT(max_abs_diff(full, dense_full), 1e-12);
}

TEST(PackedAttention, LogitsEqualUnpacked) {
  auto model = tiny_model(31);
  model->eval();
  torch::NoGradGuard no_grad;
  const auto samples = three_samples();
  const auto p = pack(model, samples);
  const auto packed = packed_logits(model, p);
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto alone = model->forward(samples[i]);
    const auto segment = packed.slice(1, p.cu_seqlens[i], p.cu_seqlens[i + 1]);
    EXPECT_LT(max_abs_diff(segment, alone), 1e-5) << "sample " << i;
  }
  // Without cu_seqlens the later samples would see the earlier ones: the packing matters.
  auto embeds = model->embed_inputs(p.inputs);
  const auto leaky = model->lm_logits(model->decode(embeds, p.position_ids));
  EXPECT_GT(max_abs_diff(leaky.slice(1, p.cu_seqlens[1]), packed.slice(1, p.cu_seqlens[1])), 1e-3);
}

TEST(PackedAttention, LossAndGradientsEqualUnpacked) {
  auto model = tiny_model(32);
  model->train();
  const auto samples = three_samples();
  const auto p = pack(model, samples);
  int64_t targets = 0;
  for (const auto& s : samples) targets += s.input_ids.size(1) - 1;

  auto grads = [&]() {
    std::map<std::string, torch::Tensor> out;
    for (const auto& q : model->named_parameters()) out[q.key()] = q.value().grad().clone();
    return out;
  };
  // Packed: next-token loss within each sample (no target across a boundary), mean over targets.
  model->zero_grad();
  const auto logits = packed_logits(model, p);
  torch::Tensor packed_loss = torch::zeros({});
  for (size_t i = 0; i < samples.size(); ++i)
    packed_loss = packed_loss + summed_next_token_loss(logits.slice(1, p.cu_seqlens[i], p.cu_seqlens[i + 1]),
                                                        samples[i].input_ids);
  packed_loss = packed_loss / static_cast<double>(targets);
  packed_loss.backward();
  const auto packed_grads = grads();

  model->zero_grad();
  torch::Tensor unpacked_loss = torch::zeros({});
  for (const auto& s : samples) {
    auto loss = summed_next_token_loss(model->forward(s), s.input_ids) / static_cast<double>(targets);
    loss.backward();
    unpacked_loss = unpacked_loss + loss.detach();
  }
  const auto unpacked_grads = grads();

  EXPECT_LT(std::abs(packed_loss.item<double>() - unpacked_loss.item<double>()), 1e-5);
  ASSERT_EQ(packed_grads.size(), model->parameters().size());
  for (const auto& [name, g] : packed_grads) {
    ASSERT_TRUE(g.defined()) << name;
    EXPECT_LT(max_abs_diff(g, unpacked_grads.at(name)), 1e-5) << name;
  }
}

TEST(PackedAttention, RejectsBadPacking) {
  auto model = tiny_model(33);
  torch::NoGradGuard no_grad;
  const auto samples = three_samples();
  const auto p = pack(model, samples);
  auto embeds = model->embed_inputs(p.inputs);
  auto cu = p.cu_seqlens;
  cu.back() -= 1;
  EXPECT_THROW_MSG(model->decode(embeds, p.position_ids, {}, nullptr, cu), "cu_seqlens ends at");
  auto two = torch::cat({embeds, embeds}, 0);
  EXPECT_THROW_MSG(model->decode(two, torch::cat({p.position_ids, p.position_ids}, 1), {}, nullptr, p.cu_seqlens),
                   "batch 1");
}

}  // namespace
}  // namespace mm::testing
