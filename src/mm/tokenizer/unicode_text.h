// UTF-8 and Unicode helpers for the tokenizers: validation with lossy repair, normalization
// forms (utf8proc), and the character classes the Hugging Face `tokenizers` library uses.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace mm::unicode {

bool is_valid_utf8(std::string_view bytes);

// Replaces every maximal invalid subpart with U+FFFD, exactly like Python's
// bytes.decode("utf-8", errors="replace") and Rust's String::from_utf8_lossy.
std::string repair_utf8(std::string_view bytes);

// Decodes the code point starting at text[pos] (text must be valid UTF-8) and advances pos.
char32_t next_code_point(std::string_view text, size_t& pos);
void append_utf8(char32_t cp, std::string& out);

enum class NormalForm { nfc, nfd, nfkc, nfkd };
// text must be valid UTF-8.
std::string normalize(std::string_view text, NormalForm form);

// Unicode White_Space (what Rust's and Oniguruma's `\s` match).
bool is_white_space(char32_t cp);
// Rust regex `\w`: Alphabetic, marks, decimal digits, connector punctuation, joiners.
bool is_word_char(char32_t cp);

}  // namespace mm::unicode
