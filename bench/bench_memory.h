// Resident memory of this process, for the benchmarks' JSON lines (MB = MiB).
#pragma once
#include <sys/resource.h>

#include <fstream>
#include <string>

namespace mm::bench {

// The peak so far (ru_maxrss, KiB on Linux): it never goes down.
inline double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

// Now (VmRSS of /proc/self/status), 0 where that is not readable.
inline double rss_now_mb() {
  std::ifstream status("/proc/self/status");
  for (std::string key; status >> key;) {
    if (key != "VmRSS:") continue;
    double kb = 0;
    status >> kb;
    return kb / 1024.0;
  }
  return 0;
}

}  // namespace mm::bench
