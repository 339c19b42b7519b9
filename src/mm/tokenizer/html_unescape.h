// Python's html.unescape (HTML 5 character references), for Wan's prompt cleaning: numeric
// references (&#62; &#x3e; with or without ';', Python's replacements for invalid code points)
// and the named references of html.entities.html5, including the legacy ones accepted without
// ';' and the longest-prefix rule ("&notit;" gives "¬it;").
#pragma once
#include <string>
#include <string_view>

namespace mm {

// text must be valid UTF-8; so is the result.
std::string html_unescape(std::string_view text);

// The replacement of a named reference exactly as html.entities.html5 keys it ("amp;", "amp"),
// or nullptr.
const char* html5_entity(std::string_view name);

}  // namespace mm
