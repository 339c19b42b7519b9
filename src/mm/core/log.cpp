#include "mm/core/log.h"
#include "mm/core/log_state.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

namespace mm::log {
namespace {

struct State {
  int rank = 0;
  int world_size = 1;
  Level level = Level::info;
  bool all_ranks = std::getenv("MM_LOG_ALL_RANKS") != nullptr;
  std::function<void()> clear_live, redraw_live;
  std::mutex mutex;
};

State& state() {
  static State s;
  return s;
}

const char* tag(Level level) {
  switch (level) {
    case Level::debug: return "D";
    case Level::info: return "I";
    case Level::warn: return "W";
    case Level::error: return "E";
  }
  return "?";
}

}  // namespace

void set_rank(int rank, int world_size) {
  state().rank = rank;
  state().world_size = world_size;
}

int rank() { return state().rank; }

void set_level(Level level) { state().level = level; }

Level level_from_string(const std::string& name) {
  if (name == "debug") return Level::debug;
  if (name == "info") return Level::info;
  if (name == "warn") return Level::warn;
  if (name == "error") return Level::error;
  fail("unknown log level '", name, "' (expected debug, info, warn or error)");
}

void write(Level level, const std::string& message) {
  State& s = state();
  if (level < s.level) return;
  if (s.rank != 0 && level < Level::warn && !s.all_ranks) return;
  std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%H:%M:%S", std::localtime(&now));
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.clear_live) s.clear_live();
  if (s.world_size > 1)
    std::fprintf(stderr, "[%s %s rank%d] %s\n", tag(level), stamp, s.rank, message.c_str());
  else
    std::fprintf(stderr, "[%s %s] %s\n", tag(level), stamp, message.c_str());
  if (s.redraw_live) s.redraw_live();
}

void set_live_line(std::function<void()> clear, std::function<void()> redraw) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().clear_live = std::move(clear);
  state().redraw_live = std::move(redraw);
}

}  // namespace mm::log
