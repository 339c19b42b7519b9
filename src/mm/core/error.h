// mm::Error: the one exception type for bad input and broken invariants. Messages name the
// file, key or tensor at fault and what was expected; the CLI prints them as one line.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace mm {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {
inline void append(std::ostringstream&) {}
template <typename T, typename... Rest>
void append(std::ostringstream& out, const T& first, const Rest&... rest) {
  out << first;
  append(out, rest...);
}
}  // namespace detail

// Concatenates the arguments with operator<< into one message.
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream out;
  detail::append(out, args...);
  return out.str();
}

template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(str_cat(args...));
}

}  // namespace mm

// MM_CHECK(cond, "tensor ", name, " has shape ", shape): throws mm::Error when cond is false.
#define MM_CHECK(cond, ...)            \
  do {                                 \
    if (!(cond)) ::mm::fail(__VA_ARGS__); \
  } while (0)
