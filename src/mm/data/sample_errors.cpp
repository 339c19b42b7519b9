#include "mm/data/sample_errors.h"

#include <nlohmann/json.hpp>

#include "mm/core/log.h"

namespace mm {

const char* skip_reason_name(SkipReason reason) {
  switch (reason) {
    case SkipReason::malformed_record: return "malformed_record";
    case SkipReason::missing_media: return "missing_media";
    case SkipReason::corrupt_media: return "corrupt_media";
    case SkipReason::too_long: return "too_long";
    case SkipReason::placeholder_mismatch: return "placeholder_mismatch";
    case SkipReason::no_supervised_tokens: return "no_supervised_tokens";
  }
  return "unknown";
}

SkipCounts::SkipCounts() : SkipTally([] {
  std::vector<std::string> names;
  for (int r = 0; r < kNumSkipReasons; ++r) names.emplace_back(skip_reason_name(static_cast<SkipReason>(r)));
  return names;
}()) {}

}  // namespace mm
