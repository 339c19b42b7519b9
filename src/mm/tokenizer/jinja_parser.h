// Parses the tokens of jinja_lexer into a syntax tree, with jinja2's grammar and operator
// precedence. Tags and constructs outside the supported subset are errors naming the line,
// column and construct, never silently skipped.
#pragma once
#include <string>
#include <vector>

#include "mm/tokenizer/jinja_ast.h"
#include "mm/tokenizer/jinja_lexer.h"

namespace mm::jinja {

// `name` prefixes errors: "<name>:<line>:<column>: ...".
Body parse_template(const std::vector<Token>& tokens, const std::string& name);

}  // namespace mm::jinja
