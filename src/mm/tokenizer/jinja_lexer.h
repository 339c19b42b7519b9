// Splits a Jinja template into text and tag tokens, applying whitespace control exactly as the
// jinja2 environment of transformers' apply_chat_template is configured: trim_blocks (the first
// newline after a block or comment tag is dropped), lstrip_blocks (spaces and tabs before a block
// or comment tag at the start of a line are dropped), `-` on either side of a tag strips all
// whitespace on that side, `+` turns lstrip_blocks off for one tag. As jinja2 does, newlines are
// normalised to "\n" and one trailing newline of the template is dropped.
#pragma once
#include <string>
#include <vector>

namespace mm::jinja {

struct Token {
  enum class Kind { text, var_begin, var_end, block_begin, block_end, name, string, integer, floating, op, eof };
  Kind kind = Kind::eof;
  std::string text;  // text: the data; string: the unescaped value; name/op/number: as written
  int line = 1;
  int column = 1;
};

// Throws mm::Error "<name>:<line>:<column>: ..." for an unclosed tag or comment, an unterminated
// string or a character that starts no token.
std::vector<Token> lex_template(const std::string& source, const std::string& name);

}  // namespace mm::jinja
