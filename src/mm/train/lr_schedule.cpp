#include "mm/train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "mm/core/error.h"

namespace mm {

LrSchedule::LrSchedule(LrScheduleConfig config) : config_(std::move(config)) {
  const auto& c = config_;
  MM_CHECK(c.total_steps > 0, "lr schedule: total_steps must be > 0, got ", c.total_steps);
  MM_CHECK(c.warmup_steps >= 0, "lr schedule: warmup_steps must be >= 0, got ", c.warmup_steps);
  MM_CHECK(c.warmup_ratio >= 0 && c.warmup_ratio <= 1,
           "lr schedule: warmup_ratio must be in [0, 1], got ", c.warmup_ratio);
  MM_CHECK(c.warmup_steps == 0 || c.warmup_ratio == 0,
           "lr schedule: set warmup_steps or warmup_ratio, not both");
  MM_CHECK(c.min_lr_ratio >= 0 && c.min_lr_ratio <= 1,
           "lr schedule: min_lr_ratio must be in [0, 1], got ", c.min_lr_ratio);
  MM_CHECK(c.min_lr_ratio == 0 || c.kind == ScheduleKind::cosine, "lr schedule: min_lr_ratio applies to the cosine ",
           "schedule only, not '", c.kind == ScheduleKind::linear ? "linear" : "constant", "'");
  warmup_ = c.warmup_steps > 0
                ? c.warmup_steps
                : static_cast<int64_t>(std::ceil(static_cast<double>(c.total_steps) * c.warmup_ratio));
}

// The arithmetic mirrors transformers' lambdas term by term, so the doubles agree exactly.
double LrSchedule::multiplier(int64_t step) const {
  const double current = static_cast<double>(step);
  const double warmup = static_cast<double>(warmup_);
  if (step < warmup_) return current / std::max(1.0, warmup);
  if (config_.kind == ScheduleKind::constant) return 1.0;
  const double span = static_cast<double>(std::max<int64_t>(1, config_.total_steps - warmup_));
  if (config_.kind == ScheduleKind::linear)
    return std::max(0.0, static_cast<double>(config_.total_steps - step) / span);
  const double progress = static_cast<double>(step - warmup_) / span;
  const double num_cycles = 0.5;
  double factor = 0.5 * (1.0 + std::cos(std::numbers::pi * num_cycles * 2.0 * progress));
  if (config_.min_lr_ratio != 0)
    factor = factor * (1 - config_.min_lr_ratio) + config_.min_lr_ratio;
  return std::max(0.0, factor);
}

}  // namespace mm
