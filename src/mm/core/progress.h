// A one-line progress bar (step/total, rate, ETA) redrawn in place on a terminal. Off a
// terminal it draws nothing: the per-step log lines tell the same story in a file.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace mm {

// "label [#########...........] 30/100  2.50 it/s  ETA 00:00:28" within `width` columns
// (total <= 0: count and rate only). `rate` in items per second; 0 means not yet known.
std::string format_progress(const std::string& label, int64_t done, int64_t total, double rate,
                            int width);

class ProgressBar {
 public:
  // `initial`: items already done (a resumed run), excluded from the rate. `enabled` overrides
  // the isatty(out) decision (tests).
  ProgressBar(int64_t total, std::string label = "", int64_t initial = 0, std::FILE* out = stderr,
              std::optional<bool> enabled = std::nullopt);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  bool enabled() const { return enabled_; }
  void update(int64_t done);  // redraws at most every 100 ms (always on the last item)
  void clear();               // erases the line, so a log line can be printed in its place
  void redraw();              // draws the current state again (after clear)
  void finish();              // final draw and a newline; idempotent

 private:
  void draw();
  int64_t total_, initial_, done_;
  std::string label_;
  std::FILE* out_;
  bool enabled_, drawn_ = false, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace mm
