#include "mm/data/skip_tally.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "mm/core/error.h"
#include "mm/core/log.h"

namespace mm {

SkipTally::SkipTally(std::vector<std::string> reason_names)
    : names_(std::move(reason_names)), records_(names_.size()) {}

SkipTally::SkipTally(const SkipTally& other) : names_(other.names_) {
  std::lock_guard<std::mutex> lock(other.mutex_);
  records_ = other.records_;
}

SkipTally& SkipTally::operator=(const SkipTally& other) {
  if (this == &other) return *this;
  std::vector<std::set<int64_t>> copy;
  {
    std::lock_guard<std::mutex> lock(other.mutex_);
    copy = other.records_;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  names_ = other.names_;
  records_ = std::move(copy);
  return *this;
}

void SkipTally::add(int reason, int64_t record, const std::string& message) {
  MM_CHECK(reason >= 0 && reason < static_cast<int>(names_.size()), "skip tally: reason ", reason, " out of range");
  int64_t before = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!records_[static_cast<size_t>(reason)].insert(record).second) return;  // met before
    for (const auto& r : records_) before += static_cast<int64_t>(r.size());
    --before;
  }
  if (before < kLoggedMessages)
    log::warn("skipping sample (", names_[static_cast<size_t>(reason)], "): ", message,
              before + 1 == kLoggedMessages ? " (further skips are only counted)" : "");
}

int64_t SkipTally::count(int reason) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(records_.at(static_cast<size_t>(reason)).size());
}

int64_t SkipTally::total() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t total = 0;
  for (const auto& r : records_) total += static_cast<int64_t>(r.size());
  return total;
}

nlohmann::json SkipTally::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (size_t r = 0; r < names_.size(); ++r) j[names_[r]] = count(static_cast<int>(r));
  j["total"] = total();
  return j;
}

nlohmann::json SkipTally::records_json() const {
  std::lock_guard<std::mutex> lock(mutex_);
  nlohmann::json j = nlohmann::json::object();
  for (size_t r = 0; r < names_.size(); ++r) j[names_[r]] = records_[r];
  return j;
}

void SkipTally::merge_records(const nlohmann::json& records, const std::string& where) {
  MM_CHECK(records.is_object(), where, ": expected an object of record lists by reason");
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [reason, list] : records.items()) {
    const auto it = std::find(names_.begin(), names_.end(), reason);
    MM_CHECK(it != names_.end(), where, ": unknown skip reason '", reason, "'");
    MM_CHECK(list.is_array(), where, ".", reason, ": expected an array of record indices");
    for (const auto& i : list) {
      MM_CHECK(i.is_number_integer() && i.get<int64_t>() >= 0, where, ".", reason, ": ", i.dump(),
               " is not a record index");
      records_[static_cast<size_t>(it - names_.begin())].insert(i.get<int64_t>());
    }
  }
}

}  // namespace mm
