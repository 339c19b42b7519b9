#include "mm/core/base64.h"

#include <cstdint>

#include "mm/core/error.h"

namespace mm {

std::string base64_decode(std::string_view text, const std::string& where) {
  std::string out;
  out.reserve(text.size() / 4 * 3);
  int bits = 0;
  uint32_t acc = 0;
  for (const char c : text) {
    int v;
    if (c >= 'A' && c <= 'Z') v = c - 'A';
    else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
    else if (c >= '0' && c <= '9') v = c - '0' + 52;
    else if (c == '+' || c == '-') v = 62;
    else if (c == '/' || c == '_') v = 63;
    else if (c == '=' || c == '\n' || c == '\r') continue;
    else fail(where, ": not valid base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

}  // namespace mm
