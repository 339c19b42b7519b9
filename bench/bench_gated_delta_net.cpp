// One Gated DeltaNet layer (Qwen3.5's linear attention) at the published Qwen3.5-9B shapes
// (hidden 4096; 16 key heads and 32 value heads of 128; conv kernel 4), forward + backward,
// fp32, chunk 64, on a row of 2048 tokens: MODE "plain" is one sample; "packed" is the same
// tokens as 4 samples (256, 768, 512, 512) in one row, conv window and state restarting at each
// (varlen); "alone" runs those 4 samples one after the other (what the reference must do). tests/reference/bench_gated_delta_net.py times transformers' torch implementation
// (torch_chunk_gated_delta_rule) on the same shapes; its packed side runs the samples one by
// one, since its torch path ignores sample boundaries. The backward is autograd's through the
// chunked form (no hand-written backward).
// Usage: bench_gated_delta_net THREADS STEPS plain|packed|alone -> one JSON line on stdout.
#include <torch/torch.h>

#include <iostream>
#include <string>
#include <vector>

#include "bench_memory.h"
#include "bench_timing.h"
#include "mm/nn/gated_delta_net.h"
#include "qwen3_5_9b_delta_net.h"

int main(int argc, char** argv) {
  const std::string mode = argc == 4 ? argv[3] : "";
  if (mode != "plain" && mode != "packed" && mode != "alone") {
    std::cerr << "usage: bench_gated_delta_net THREADS STEPS plain|packed|alone\n";
    return 2;
  }
  torch::set_num_threads(std::stoi(argv[1]));
  const int steps = std::stoi(argv[2]);
  torch::manual_seed(0);
  const auto options = mm::bench::qwen3_5_9b_delta_net();
  mm::GatedDeltaNet layer(options);
  const std::vector<int64_t> samples = {0, 256, 1024, 1536, 2048};
  const int64_t seq = 2048;
  const double rss_before = mm::bench::rss_now_mb();
  auto x = (torch::randn({1, seq, options.hidden_size}) * 0.5).requires_grad_(true);
  const auto upstream = torch::randn({1, seq, options.hidden_size});
  auto step = [&] {
    layer->zero_grad();
    if (mode == "plain") {
      layer->forward(x).backward(upstream);
    } else if (mode == "packed") {
      layer->forward(x, {}, samples).backward(upstream);
    } else {
      for (size_t s = 1; s < samples.size(); ++s) {
        const int64_t start = samples[s - 1], length = samples[s] - samples[s - 1];
        layer->forward(x.narrow(1, start, length)).backward(upstream.narrow(1, start, length));
      }
    }
  };
  const double median = mm::bench::median_ms(step, steps);
  std::cout << "{\"impl\": \"mmtrain_" << mode << "\", \"tokens\": " << seq << ", \"step_ms\": " << median
            << ", \"tokens_per_s\": " << seq / (median / 1e3)
            << ", \"layer_rss_mb\": " << mm::bench::peak_rss_mb() - rss_before << "}" << std::endl;
  return 0;
}
