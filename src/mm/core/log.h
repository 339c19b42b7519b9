// Rank-aware logging: every line carries the process rank when running distributed, and
// non-zero ranks stay quiet below warnings unless MM_LOG_ALL_RANKS=1.
#pragma once
#include <string>

#include "mm/core/error.h"

namespace mm::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3 };

// Set once at start-up (the launcher environment decides the rank).
void set_rank(int rank, int world_size);
void set_level(Level level);
Level level_from_string(const std::string& name);  // "debug" | "info" | "warn" | "error"

void write(Level level, const std::string& message);

template <typename... Args>
void debug(const Args&... args) { write(Level::debug, str_cat(args...)); }
template <typename... Args>
void info(const Args&... args) { write(Level::info, str_cat(args...)); }
template <typename... Args>
void warn(const Args&... args) { write(Level::warn, str_cat(args...)); }
template <typename... Args>
void error(const Args&... args) { write(Level::error, str_cat(args...)); }

}  // namespace mm::log
