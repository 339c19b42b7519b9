// Small pieces both synthetic datasets (shapes images, moving-shape clips) use.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace mm::synth {

// splitmix64: tiny, well mixed, and defined bit for bit (std distributions are not portable).
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n); the modulo bias is negligible for the small n used here.
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
  // Uniform in [lo, hi].
  int64_t between(int64_t lo, int64_t hi) { return lo + below(hi - lo + 1); }
};

// FNV-1a of a sample's pixels: the same picture drawn twice is seen and redrawn.
inline uint64_t fnv1a(const std::vector<uint8_t>& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : bytes) h = (h ^ b) * 0x100000001b3ull;
  return h;
}

// "000042": the file name of record 42.
inline std::string record_id(int64_t index) {
  char name[32];
  std::snprintf(name, sizeof name, "%06lld", static_cast<long long>(index));
  return name;
}

}  // namespace mm::synth
