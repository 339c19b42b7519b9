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

// Why a sample was skipped: one taxonomy for every dataset (conversations, text-video clips).
// Each dataset counts the reasons it can meet (SkipCounts), in the order it lists them.
enum class SkipReason {
  malformed_record,      // not JSON, or a record without the expected fields
  missing_media,         // an image / video file that does not exist
  corrupt_media,         // a media file that exists but does not decode (or has no frames)
  too_long,              // longer than max_seq_len (and truncation could not help)
  placeholder_mismatch,  // <image>/<video> tags (or placeholder tokens) differ from the media count
  no_supervised_tokens,  // no assistant turn, or nothing left to learn from
  caption_too_long,      // a caption over max_caption_chars or max_caption_words
  too_few_frames,        // a clip that fills fewer frames than the smallest bucket
  no_bucket,             // a clip whose size or aspect ratio fits no bucket
};

// "malformed_record", "missing_media", ... (the enumerator's name).
const char* skip_reason_name(SkipReason reason);

// A sample that cannot be used; what() names the record (file:line) or the media file and what is
// wrong.
class SampleError : public Error {
 public:
  SampleError(SkipReason reason, const std::string& message) : Error(message), reason_(reason) {}
  SkipReason reason() const { return reason_; }

 private:
  SkipReason reason_;
};

// The bad records per reason (skip_tally.h: each counted once, however often met), for the
// reasons a dataset can meet, in its order (what checkpoints and metrics list). add() is safe from
// several threads; the loaders add in sampler order so the counts (and which messages get logged)
// are deterministic.
class SkipCounts : public SkipTally {
 public:
  // The conversation datasets' reasons.
  SkipCounts();
  explicit SkipCounts(std::vector<SkipReason> reasons);
  // `record`: the record's index in the data file (its line while opening a text-video dataset).
  void add(SkipReason reason, int64_t record, const std::string& message) {
    SkipTally::add(index_of(reason), record, message);
  }
  int64_t count(SkipReason reason) const { return SkipTally::count(index_of(reason)); }
  const std::vector<SkipReason>& reasons() const { return reasons_; }

 private:
  int index_of(SkipReason reason) const;
  std::vector<SkipReason> reasons_;
};

}  // namespace mm
