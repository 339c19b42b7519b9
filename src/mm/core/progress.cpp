#include "mm/core/progress.h"

#include "mm/core/log.h"
#include "mm/core/log_state.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace mm {
namespace {

std::string hms(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  return buf;
}

int terminal_width(std::FILE* out) {
  winsize ws{};
  if (::ioctl(::fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20) return ws.ws_col;
  return 80;
}

}  // namespace

std::string format_progress(const std::string& label, int64_t done, int64_t total, double rate,
                            int width) {
  char tail[128];
  std::string eta = "--:--:--";
  if (total > 0 && rate > 0) eta = hms(static_cast<double>(total - done) / rate);
  if (total > 0)
    std::snprintf(tail, sizeof tail, " %lld/%lld  %.2f it/s  ETA %s", static_cast<long long>(done),
                  static_cast<long long>(total), rate, eta.c_str());
  else
    std::snprintf(tail, sizeof tail, " %lld  %.2f it/s", static_cast<long long>(done), rate);
  std::string head = label.empty() ? "" : label + " ";
  std::string line;
  const int bar = width - static_cast<int>(head.size() + std::string(tail).size()) - 2;
  if (total > 0 && bar >= 10 && width > 0) {
    const double frac = std::clamp(static_cast<double>(done) / static_cast<double>(total), 0.0, 1.0);
    const int filled = static_cast<int>(frac * bar);
    line = head + "[" + std::string(filled, '#') + std::string(bar - filled, '.') + "]" + tail;
  } else {
    line = head + tail;
  }
  if (width > 0 && static_cast<int>(line.size()) > width) line.resize(width);
  return line;
}

ProgressBar::ProgressBar(int64_t total, std::string label, int64_t initial, std::FILE* out,
                         std::optional<bool> enabled)
    : total_(total), initial_(initial), done_(initial), label_(std::move(label)), out_(out),
      enabled_(enabled.value_or(::isatty(::fileno(out)) == 1)),
      start_(std::chrono::steady_clock::now()), last_report_(start_) {
  if (enabled_) log::set_live_line([this] { clear(); }, [this] { redraw(); });
}

ProgressBar::~ProgressBar() {
  finish();
  if (enabled_) log::set_live_line({}, {});
}

// Items per second since the start; 0 (unknown) for the first half second, whose few items would
// give a meaningless rate (the first draw once read "321027 it/s").
double ProgressBar::rate() const {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return elapsed >= 0.5 ? static_cast<double>(done_ - initial_) / elapsed : 0.0;
}

void ProgressBar::report() {
  std::fprintf(out_, "%s\n", format_progress(label_ + ":", done_, total_, rate(), 0).c_str());
  std::fflush(out_);
  last_report_ = std::chrono::steady_clock::now();
}

void ProgressBar::update(int64_t done) {
  done_ = done;
  if (!enabled_ && report_every_s_ > 0 && !finished_ &&
      std::chrono::steady_clock::now() - last_report_ >= std::chrono::duration<double>(report_every_s_))
    report();
  if (!enabled_ || finished_) return;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && now - last_draw_ < std::chrono::milliseconds(100) && done_ != total_) return;
  draw();
}

void ProgressBar::draw() {
  const auto now = std::chrono::steady_clock::now();
  const std::string line = format_progress(label_, done_, total_, rate(), terminal_width(out_) - 1);
  std::fprintf(out_, "\r\033[K%s", line.c_str());
  std::fflush(out_);
  drawn_ = true;
  last_draw_ = now;
}

void ProgressBar::clear() {
  if (!enabled_ || !drawn_ || finished_) return;
  std::fputs("\r\033[K", out_);
  std::fflush(out_);
}

void ProgressBar::redraw() {
  if (enabled_ && !finished_) draw();
}

void ProgressBar::finish() {
  if (finished_) return;
  finished_ = true;
  if (!enabled_ && report_every_s_ > 0) report();
  if (!enabled_ || !drawn_) return;
  finished_ = false;
  draw();
  finished_ = true;
  std::fputs("\n", out_);
  std::fflush(out_);
}

}  // namespace mm
