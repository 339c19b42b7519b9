// Attention over packed samples, forward + backward, at Qwen2.5-VL-3B's decoder head shapes (16
// query heads, 2 KV heads, head dim 128), fp32: 4096 tokens packed from 6 samples of uneven
// length, causal within each. IMPL "segments" is what the decoder runs
// (nn/varlen_attention.h: SDPA per segment length, linear memory); "dense" is the block-diagonal
// [seq, seq] mask through one SDPA call, which the decoder used before and transformers builds
// for packed sequences (tests/reference/bench_packed_attention.py times that side).
// Usage: bench_packed_attention THREADS STEPS segments|dense -> one JSON line on stdout.
#include <torch/torch.h>

#include <iostream>
#include <string>
#include <vector>

#include "mm/nn/varlen_attention.h"
#include "bench_memory.h"
#include "bench_timing.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: bench_packed_attention THREADS STEPS segments|dense\n";
    return 2;
  }
  torch::set_num_threads(std::stoi(argv[1]));
  const int steps = std::stoi(argv[2]);
  const std::string impl = argv[3];
  if (impl != "segments" && impl != "dense") {
    std::cerr << "bench_packed_attention: IMPL must be segments or dense\n";
    return 2;
  }
  const std::vector<int64_t> lengths = {512, 1024, 384, 768, 896, 512};
  const int64_t heads = 16, kv_heads = 2, head_dim = 128;
  std::vector<int64_t> cu = {0};
  for (const auto l : lengths) cu.push_back(cu.back() + l);
  const int64_t seq = cu.back();
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  const double rss_before = mm::bench::rss_now_mb();
  torch::manual_seed(0);
  auto q = torch::randn({seq, heads, head_dim}).requires_grad_(true);
  auto k = torch::randn({seq, kv_heads, head_dim}).requires_grad_(true);
  auto v = torch::randn({seq, kv_heads, head_dim}).requires_grad_(true);
  const auto upstream = torch::randn({seq, heads, head_dim});

  const mm::VarlenSegments segments(cu, torch::kCPU);
  auto step = [&] {
    torch::Tensor out;
    if (impl == "segments") {
      out = segments.attention(q, k, v, scale, /*causal=*/true);
    } else {
      std::vector<int64_t> segment_of;
      for (size_t i = 1; i < cu.size(); ++i) segment_of.insert(segment_of.end(), cu[i] - cu[i - 1], static_cast<int64_t>(i));
      const auto seg = torch::tensor(segment_of);
      const auto pos = torch::arange(seq);
      const auto mask = ((seg.view({seq, 1}) == seg.view({1, seq})) & (pos.view({1, seq}) <= pos.view({seq, 1})))
                            .view({1, 1, seq, seq});
      auto first = [](const torch::Tensor& t) { return t.transpose(0, 1).unsqueeze(0); };
      out = at::scaled_dot_product_attention(first(q), first(k), first(v), mask, 0.0, false, scale, true)[0].transpose(0, 1);
    }
    out.backward(upstream);
  };
  const double median = mm::bench::median_ms(step, steps);
  std::cout << "{\"impl\": \"mmtrain_" << impl << "\", \"tokens\": " << seq << ", \"step_ms\": " << median
            << ", \"tokens_per_s\": " << seq / (median / 1e3)
            << ", \"attention_rss_mb\": " << mm::bench::peak_rss_mb() - rss_before << "}" << std::endl;
  return 0;
}
