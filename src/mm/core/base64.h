// Base64 decoding, standard and URL-safe alphabets alike, padding and line breaks ignored: data:
// URLs of chat messages and tokenizer.json's precompiled_charsmap.
#pragma once
#include <string>
#include <string_view>

namespace mm {

// Fails naming `where` on a character outside both alphabets.
std::string base64_decode(std::string_view text, const std::string& where);

}  // namespace mm
