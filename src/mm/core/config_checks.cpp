#include "mm/core/config_checks.h"

#include "mm/core/error.h"

namespace mm {

void require_positive(const std::string& where, std::initializer_list<std::pair<const char*, int64_t>> sizes) {
  for (const auto& [key, value] : sizes) MM_CHECK(value > 0, where, key, " must be positive, got ", value);
}

}  // namespace mm
