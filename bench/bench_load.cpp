// Loading a real-shape Qwen2.5-VL and answering one photo, as `mmtrain infer` does it: time to
// load, resident memory after loading and at the peak, the prompt's logits and a greedy answer.
// Usage: bench_load MODEL_DIR IMAGE PROMPT THREADS DTYPE(fp32|bf16) NEW_TOKENS LOGITS_OUT
// -> one JSON line on stdout; the prompt's logits (fp32, [seq, vocab]) and the answer's token
// ids go to LOGITS_OUT (safetensors) for tests/reference/bench_load.py to compare.
#include <torch/torch.h>

#include <chrono>
#include <iostream>
#include <string>

#include "mm/core/safetensors.h"
#include "mm/tasks/vlm_chat.h"
#include "bench_memory.h"

using mm::bench::peak_rss_mb;
using mm::bench::rss_now_mb;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 8) {
    std::cerr << "usage: bench_load MODEL_DIR IMAGE PROMPT THREADS fp32|bf16 NEW_TOKENS LOGITS_OUT\n";
    return 2;
  }
  torch::set_num_threads(std::stoi(argv[4]));
  const std::string dtype_name = argv[5];
  const auto dtype = dtype_name == "bf16" ? torch::kBFloat16 : torch::kFloat32;
  const double rss_before = rss_now_mb();
  const auto start = std::chrono::steady_clock::now();
  mm::QwenVLChat chat(argv[1], dtype);
  const double load_s = seconds_since(start);
  const double rss_loaded = rss_now_mb(), peak_loaded = peak_rss_mb();

  std::vector<mm::ChatMessage> messages = {
      {"user", {{mm::ContentPart::Kind::image, "", argv[2]}, {mm::ContentPart::Kind::text, argv[3], ""}}}};
  const auto inputs = chat.prepare(messages);
  torch::Tensor logits;
  {
    torch::NoGradGuard no_grad;
    logits = chat.model()->forward(inputs).squeeze(0).to(torch::kFloat32);
  }
  mm::GenerationConfig config;
  config.max_new_tokens = std::stoll(argv[6]);
  const auto answer_start = std::chrono::steady_clock::now();
  const auto ids = chat.generate_ids(inputs, config);
  const double answer_s = seconds_since(answer_start);
  mm::save_safetensors(argv[7], {{"logits", logits}, {"answer", torch::tensor(ids, torch::kInt64)}});
  std::cout << "{\"impl\": \"mmtrain\", \"dtype\": \"" << dtype_name << "\", \"load_s\": " << load_s
            << ", \"rss_before_load_mb\": " << rss_before << ", \"rss_after_load_mb\": " << rss_loaded
            << ", \"peak_rss_load_mb\": " << peak_loaded << ", \"answer_s\": " << answer_s
            << ", \"peak_rss_mb\": " << peak_rss_mb() << ", \"prompt_tokens\": " << inputs.input_ids.size(1)
            << ", \"new_tokens\": " << ids.size() << "}\n";
}
