// Why a training sample was skipped, and the per-run tally of skipped records. A dataset sample that cannot
// be used (bad JSON line, missing or corrupt media, too long, ...) is skipped and counted; the
// first few reasons are logged so a user sees what is wrong without drowning the log.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "mm/core/error.h"
#include "mm/data/skip_tally.h"

namespace mm {

// What a run does with a sample it cannot use (data.on_error): skip and count it, or stop.
enum class OnError { skip, fail };

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

// The bad records per reason (skip_tally.h: each counted once, however often met). add() is
// safe from several threads; the loader adds in sampler order so the counts (and which messages
// get logged) are deterministic.
class SkipCounts : public SkipTally {
 public:
  SkipCounts();
  // `record`: the record's index in the data file.
  void add(SkipReason reason, int64_t record, const std::string& message) {
    SkipTally::add(static_cast<int>(reason), record, message);
  }
  int64_t count(SkipReason reason) const { return SkipTally::count(static_cast<int>(reason)); }
};

}  // namespace mm
