// GPT-2's byte-level alphabet (bytes_to_unicode): every byte is shown as one printable
// character, so BPE works on bytes while vocabularies stay valid UTF-8 text.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mm::byte_level {

// Appends the byte-level characters of `bytes` (UTF-8, 1 or 2 bytes per input byte).
void append_mapped(std::string_view bytes, std::string& out);

// The byte a code point of the alphabet stands for, or -1 when it is not in the alphabet.
int byte_of_char(char32_t cp);

// The ByteLevel decoder of `tokenizers`: each token made only of alphabet characters becomes
// its bytes, any other token is kept as it is; the whole is read as lossy UTF-8.
std::string decode(const std::vector<std::string_view>& tokens);

}  // namespace mm::byte_level
