// Learning-rate schedules equal to transformers' (optimization.py, 5.17):
// get_cosine_schedule_with_warmup, get_cosine_with_min_lr_schedule_with_warmup (min_lr_rate),
// get_linear_schedule_with_warmup and get_constant_schedule_with_warmup.
#pragma once
#include <cstdint>
#include <string>

namespace mm {

// schedule.kind.
enum class ScheduleKind { cosine, linear, constant };

struct LrScheduleConfig {
  ScheduleKind kind = ScheduleKind::cosine;
  // Warmup length: warmup_steps when > 0, else ceil(total_steps * warmup_ratio) (as
  // TrainingArguments.get_warmup_steps); setting both is an error.
  int64_t warmup_steps = 0;
  double warmup_ratio = 0;
  int64_t total_steps = 0;    // optimizer steps of the whole run (> 0)
  double min_lr_ratio = 0.0;  // cosine only: the floor as a fraction of the base lr
};

class LrSchedule {
 public:
  explicit LrSchedule(LrScheduleConfig config);  // validates; errors name the field

  // The factor on the base lr after `step` optimizer steps (LambdaLR's last_epoch): the lr
  // used by optimizer step number step+1.
  double multiplier(int64_t step) const;
  double lr(int64_t step, double base_lr) const { return base_lr * multiplier(step); }

  int64_t warmup_steps() const { return warmup_; }
  const LrScheduleConfig& config() const { return config_; }

 private:
  LrScheduleConfig config_;
  int64_t warmup_ = 0;
};

}  // namespace mm
