// Wan's prompt cleaning (diffusers' pipeline_wan.prompt_clean) without ftfy, which diffusers
// runs only when it is installed: html.unescape twice, str.strip(), every run of white space
// made one space with the `regex` module (diffusers imports it as `re`), str.strip() again.
// The two white spaces differ: str.strip() removes str.isspace() characters (Unicode
// White_Space plus the separators U+001C..U+001F), `regex`'s \s matches White_Space only, so a
// U+001C inside the prompt survives.
#pragma once
#include <string>
#include <string_view>

namespace mm {

// Invalid UTF-8 is repaired to U+FFFD first, like bytes.decode("utf-8", errors="replace").
std::string wan_prompt_clean(std::string_view text);

// Python's str.isspace() for one code point.
bool is_python_space(char32_t cp);

}  // namespace mm
