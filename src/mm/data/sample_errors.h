// Why a training sample was skipped, and the per-run tally of skips. A dataset sample that cannot
// be used (bad JSON line, missing or corrupt media, too long, ...) is skipped and counted; the
// first few reasons are logged so a user sees what is wrong without drowning the log.
#pragma once
#include <array>
#include <cstdint>
#include <mutex>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "mm/core/error.h"

namespace mm {

enum class SkipReason {
  malformed_record,      // not JSON, or a record without the expected fields
  missing_media,         // an image / video file that does not exist
  corrupt_media,         // a media file that exists but does not decode
  too_long,              // longer than max_seq_len (and truncation could not help)
  placeholder_mismatch,  // <image>/<video> tags (or placeholder tokens) differ from the media count
  no_supervised_tokens,  // no assistant turn, or nothing left to learn from
};
inline constexpr int kNumSkipReasons = 6;

// "malformed_record", "missing_media", ... (the enumerator's name).
const char* skip_reason_name(SkipReason reason);

// A sample that cannot be used; what() names file:line and what is wrong.
class SampleError : public Error {
 public:
  SampleError(SkipReason reason, const std::string& message) : Error(message), reason_(reason) {}
  SkipReason reason() const { return reason_; }

 private:
  SkipReason reason_;
};

// Counts per reason. add() is safe from several threads; the loader adds in sampler order so the
// counts (and which messages get logged) are deterministic.
class SkipCounts {
 public:
  static constexpr int kLoggedMessages = 5;

  SkipCounts() = default;
  SkipCounts(const SkipCounts& other);
  SkipCounts& operator=(const SkipCounts& other);

  // Counts one skip; logs `message` with log::warn for the first kLoggedMessages skips.
  void add(SkipReason reason, const std::string& message);
  int64_t count(SkipReason reason) const;
  int64_t total() const;
  // {"malformed_record": n, ..., "total": n} with every reason present.
  nlohmann::json to_json() const;

 private:
  mutable std::mutex mutex_;
  std::array<int64_t, kNumSkipReasons> counts_{};
};

}  // namespace mm
