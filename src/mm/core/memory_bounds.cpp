#include "mm/core/memory_bounds.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "mm/core/error.h"

namespace mm {

int64_t host_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : INT64_MAX;
}

void check_model_fits_in_memory(const std::string& file, const std::vector<std::pair<std::string, double>>& terms) {
  double total = 0;
  const std::pair<std::string, double>* largest = nullptr;
  for (const auto& term : terms) {
    total += term.second;
    if (!largest || term.second > largest->second) largest = &term;
  }
  const double bytes = total * 4;  // fp32, the least a training or loading run holds
  if (bytes <= static_cast<double>(host_memory_bytes())) return;
  char size[64], memory[64];
  std::snprintf(size, sizeof size, "%.3g", total);
  std::snprintf(memory, sizeof memory, "%.1f GiB", static_cast<double>(host_memory_bytes()) / (1 << 30));
  fail(file, ": the model it describes has ", size, " parameters, more than fit in this machine's ", memory,
       " (largest part: ", largest->first, "); check the file");
}

}  // namespace mm
