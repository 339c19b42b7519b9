// Which records were skipped, by reason: the tally behind the skipped-sample counts of both data
// pipelines. A record counts once however often it is met (every epoch meets a bad record again,
// and a resumed run meets the ones the run before it met), so the counts are bad records, not
// skip events. The first kLoggedMessages records skipped are logged. Thread-safe.
#pragma once
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace mm {

class SkipTally {
 public:
  static constexpr int kLoggedMessages = 5;

  explicit SkipTally(std::vector<std::string> reason_names);
  SkipTally(const SkipTally& other);
  SkipTally& operator=(const SkipTally& other);

  // Counts `record` (its index in the data) under `reason` unless already counted there; logs
  // `message` with log::warn for the first kLoggedMessages counted records.
  void add(int reason, int64_t record, const std::string& message);
  int64_t count(int reason) const;
  int64_t total() const;
  // {"<reason>": n, ..., "total": n} with every reason present.
  nlohmann::json to_json() const;
  // {"<reason>": [record, ...], ...}: what a checkpoint keeps so that a resumed run goes on
  // counting records, not events. merge_records adds such a list (silently); errors name `where`.
  nlohmann::json records_json() const;
  void merge_records(const nlohmann::json& records, const std::string& where);
  const std::vector<std::string>& reason_names() const { return names_; }

 private:
  std::vector<std::string> names_;
  mutable std::mutex mutex_;
  std::vector<std::set<int64_t>> records_;  // per reason
};

}  // namespace mm
