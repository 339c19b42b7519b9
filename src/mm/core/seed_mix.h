// Every derivation of a seed from another, in one place, so that a stream's numbers are defined
// bit for bit and two streams never share one by accident. Keys are combined as (seed, epoch,
// index) so that what a sample draws does not depend on the batch it lands in, the rank that
// loads it or a resume.
#pragma once
#include <cstdint>

namespace mm {

inline constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ull;  // splitmix64's increment

// splitmix64: tiny, well mixed, and defined bit for bit (std distributions are not portable).
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += kGoldenGamma);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n); the modulo bias is negligible for the small n used here.
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
  // Uniform in [lo, hi].
  int64_t between(int64_t lo, int64_t hi) { return lo + below(hi - lo + 1); }
};

// The key of one sample in one epoch of a run seeded `seed` (random crops use it as their seed).
inline uint64_t sample_key(uint64_t seed, uint64_t epoch, uint64_t index) {
  return seed * kGoldenGamma ^ (epoch << 40) ^ index;
}

// A generator seed from sample_key, through part of splitmix64's finalizer: nearby keys give
// unrelated seeds (each sample's diffusion noise and timestep).
inline uint64_t sample_generator_seed(uint64_t seed, uint64_t epoch, uint64_t index) {
  uint64_t key = sample_key(seed, epoch, index);
  key ^= key >> 31;
  key *= 0xBF58476D1CE4E5B9ull;
  key ^= key >> 27;
  return key;
}

// The seed of sub-stream `stream` (e.g. a bucket's shuffle) of a run seeded `seed`: the golden
// increment keeps nearby stream ids apart.
inline uint64_t stream_seed(uint64_t seed, uint64_t stream) { return seed ^ (stream + 1) * kGoldenGamma; }

}  // namespace mm
