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

SkipCounts::SkipCounts(const SkipCounts& other) {
  std::lock_guard<std::mutex> lock(other.mutex_);
  counts_ = other.counts_;
}

SkipCounts& SkipCounts::operator=(const SkipCounts& other) {
  if (this == &other) return *this;
  std::array<int64_t, kNumSkipReasons> copy;
  {
    std::lock_guard<std::mutex> lock(other.mutex_);
    copy = other.counts_;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  counts_ = copy;
  return *this;
}

void SkipCounts::add(SkipReason reason, const std::string& message) {
  int64_t before = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int64_t c : counts_) before += c;
    ++counts_[static_cast<int>(reason)];
  }
  if (before < kLoggedMessages)
    log::warn("skipping sample (", skip_reason_name(reason), "): ", message,
              before + 1 == kLoggedMessages ? " (further skips are only counted)" : "");
}

int64_t SkipCounts::count(SkipReason reason) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counts_[static_cast<int>(reason)];
}

int64_t SkipCounts::total() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t total = 0;
  for (int64_t c : counts_) total += c;
  return total;
}

nlohmann::json SkipCounts::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (int r = 0; r < kNumSkipReasons; ++r) j[skip_reason_name(static_cast<SkipReason>(r))] = count(static_cast<SkipReason>(r));
  j["total"] = total();
  return j;
}

}  // namespace mm
