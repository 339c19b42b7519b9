// Small pieces both synthetic datasets (shapes images, moving-shape clips) use.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "mm/core/seed_mix.h"

namespace mm::synth {

using mm::SplitMix64;  // core/seed_mix.h

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
