#include "mm/tokenizer/byte_level.h"

#include <array>

#include "mm/tokenizer/unicode_text.h"

namespace mm::byte_level {
namespace {

constexpr char32_t kMaxChar = 256 + 68;

struct Alphabet {
  std::array<std::string, 256> utf8_of_byte;
  std::array<int16_t, kMaxChar> byte_of_cp;

  Alphabet() {
    byte_of_cp.fill(-1);
    char32_t next_extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const char32_t cp = printable ? static_cast<char32_t>(b) : next_extra++;
      unicode::append_utf8(cp, utf8_of_byte[b]);
      byte_of_cp[cp] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet instance;
  return instance;
}

}  // namespace

void append_mapped(std::string_view bytes, std::string& out) {
  const auto& table = alphabet().utf8_of_byte;
  for (char c : bytes) out += table[static_cast<uint8_t>(c)];
}

int byte_of_char(char32_t cp) { return cp < kMaxChar ? alphabet().byte_of_cp[cp] : -1; }

std::string decode(const std::vector<std::string_view>& tokens) {
  std::string bytes;
  std::string token_bytes;
  for (std::string_view token : tokens) {
    token_bytes.clear();
    bool all_mapped = true;
    for (size_t pos = 0; pos < token.size() && all_mapped;) {
      const int b = byte_of_char(unicode::next_code_point(token, pos));
      if (b < 0) all_mapped = false;
      token_bytes.push_back(static_cast<char>(b));
    }
    if (all_mapped) {
      bytes += token_bytes;
    } else {
      bytes += token;
    }
  }
  return unicode::is_valid_utf8(bytes) ? bytes : unicode::repair_utf8(bytes);
}

}  // namespace mm::byte_level
