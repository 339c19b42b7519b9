// Mixed precision for training steps: bf16 autocast around forward passes, fp32 master weights.
#pragma once
#include <ATen/autocast_mode.h>

namespace mm {

// bf16 autocast on `device` for the guard's lifetime (a no-op when not enabled).
class AutocastGuard {
 public:
  AutocastGuard(bool enabled, c10::DeviceType device) : enabled_(enabled), device_(device) {
    if (!enabled_) return;
    previous_ = at::autocast::is_autocast_enabled(device_);
    previous_dtype_ = at::autocast::get_autocast_dtype(device_);
    at::autocast::set_autocast_dtype(device_, at::kBFloat16);
    at::autocast::set_autocast_enabled(device_, true);
    at::autocast::increment_nesting();
  }
  ~AutocastGuard() {
    if (!enabled_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(device_, previous_);
    at::autocast::set_autocast_dtype(device_, previous_dtype_);
  }

 private:
  bool enabled_;
  c10::DeviceType device_;
  bool previous_ = false;
  at::ScalarType previous_dtype_ = at::kBFloat16;
};


}  // namespace mm
