// Qwen-VL latency (any family of the registry's Qwen-VL models, e.g. Qwen2.5-VL or Qwen3.5 with its
// DeltaNet caches): one image + prompt -> prefill, then greedy decoding of new tokens.
// Usage: bench_vlm MODEL_DIR IMAGE PROMPT THREADS NEW_TOKENS REPEATS -> one JSON line on stdout.
// Prefill = generate with one new token; decode per token = (full - prefill) / (new tokens - 1).
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <iostream>

#include "mm/tasks/vlm_chat.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::cerr << "usage: bench_vlm MODEL_DIR IMAGE PROMPT THREADS NEW_TOKENS REPEATS\n";
    return 2;
  }
  torch::set_num_threads(std::stoi(argv[4]));
  const int64_t new_tokens = std::stoll(argv[5]);
  const int repeats = std::stoi(argv[6]);
  mm::QwenVLChat chat(argv[1], torch::kFloat32);
  std::vector<mm::ChatMessage> messages = {
      {"user",
       {{mm::ContentPart::Kind::image, "", argv[2]}, {mm::ContentPart::Kind::text, argv[3], ""}}}};
  const auto inputs = chat.prepare(messages);

  auto time_generate = [&](int64_t n, size_t* produced) {
    mm::GenerationConfig config;
    config.max_new_tokens = n;
    const auto start = std::chrono::steady_clock::now();
    *produced = chat.generate_ids(inputs, config).size();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  size_t produced = 0;
  time_generate(new_tokens, &produced);  // warm-up
  std::vector<double> prefill, full;
  for (int r = 0; r < repeats; ++r) {
    size_t one = 0;
    prefill.push_back(time_generate(1, &one));
    full.push_back(time_generate(new_tokens, &produced));
  }
  const double p = median(prefill), f = median(full);
  std::cout << "{\"impl\": \"mmtrain\", \"prompt_tokens\": " << inputs.input_ids.size(1)
            << ", \"new_tokens\": " << produced << ", \"prefill_ms\": " << p * 1e3
            << ", \"decode_ms_per_token\": " << (f - p) * 1e3 / std::max<size_t>(produced - 1, 1)
            << ", \"total_ms\": " << f * 1e3 << "}\n";
}
