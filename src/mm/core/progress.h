// A one-line progress bar (step/total, rate, ETA) redrawn in place on a terminal; log lines
// printed meanwhile go above it. Off a terminal it draws nothing, unless report_every() asks for
// a plain line now and then (for work that logs nothing else while it runs).
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace mm {

// "label [#########...........] 30/100  2.50 it/s  ETA 00:00:28" within `width` columns
// (total <= 0: count and rate only; width <= 0: no bar and no limit). `rate` in items per second;
// 0 means not yet known.
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
  // Off a terminal: a line "label: done/total  rate  ETA" every `seconds` and at the end.
  void report_every(double seconds) { report_every_s_ = seconds; }

 private:
  void draw();
  int64_t total_, initial_, done_;
  std::string label_;
  std::FILE* out_;
  bool enabled_, drawn_ = false, finished_ = false;
  double report_every_s_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_, last_report_;
  double rate() const;
  void report();
};

}  // namespace mm
