// Tokenizer throughput: encodes every line of a corpus file, repeated, on one thread.
// Usage: bench_tokenizer TOKENIZER_DIR CORPUS_FILE REPEATS  -> one JSON line on stdout.
#include <chrono>
#include <fstream>
#include <iostream>

#include "mm/tokenizer/bpe_tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: bench_tokenizer TOKENIZER_DIR CORPUS_FILE REPEATS\n";
    return 2;
  }
  const auto tokenizer = mm::Tokenizer::from_dir(argv[1]);
  std::ifstream in(argv[2]);
  std::vector<std::string> lines;
  size_t bytes = 0;
  for (std::string line; std::getline(in, line);) {
    bytes += line.size();
    lines.push_back(std::move(line));
  }
  const int repeats = std::stoi(argv[3]);
  size_t tokens = 0;
  for (const auto& line : lines) tokens += tokenizer.encode(line).size();  // warm-up
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < repeats; ++r)
    for (const auto& line : lines) tokens += tokenizer.encode(line).size();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "{\"impl\": \"mmtrain\", \"bytes\": " << bytes * repeats << ", \"seconds\": " << seconds
            << ", \"mb_per_s\": " << bytes * repeats / seconds / 1e6 << "}\n";
}
