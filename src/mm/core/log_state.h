// What few users of log.h need: the rank the logger was given, and the live line (a progress bar
// redrawn in place on stderr) that log lines are printed above. Kept out of log.h, which every
// file includes.
#pragma once
#include <functional>

namespace mm::log {

int rank();  // as given to set_rank; 0 in a single process

// Every log line first erases the live line and then draws it again below, so the two never share
// a line. One at a time; empty functions detach it.
void set_live_line(std::function<void()> clear, std::function<void()> redraw);

}  // namespace mm::log
