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
    case SkipReason::caption_too_long: return "caption_too_long";
    case SkipReason::too_few_frames: return "too_few_frames";
    case SkipReason::no_bucket: return "no_bucket";
  }
  return "unknown";
}

namespace {

std::vector<std::string> names_of(const std::vector<SkipReason>& reasons) {
  std::vector<std::string> names;
  for (const auto r : reasons) names.emplace_back(skip_reason_name(r));
  return names;
}

}  // namespace

SkipCounts::SkipCounts()
    : SkipCounts({SkipReason::malformed_record, SkipReason::missing_media, SkipReason::corrupt_media,
                  SkipReason::too_long, SkipReason::placeholder_mismatch, SkipReason::no_supervised_tokens}) {}

SkipCounts::SkipCounts(std::vector<SkipReason> reasons) : SkipTally(names_of(reasons)), reasons_(std::move(reasons)) {}

int SkipCounts::index_of(SkipReason reason) const {
  for (size_t i = 0; i < reasons_.size(); ++i)
    if (reasons_[i] == reason) return static_cast<int>(i);
  fail("skip counts: reason ", skip_reason_name(reason), " is not one this dataset counts");
}

}  // namespace mm
