// The syntax tree of a Jinja template, as jinja_parser builds it and jinja_template walks it.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mm/tokenizer/jinja_value.h"

namespace mm::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    literal,      // value
    name,         // name
    list,         // children
    tuple,        // children
    dict,         // children: key, value, key, value, ...
    attr,         // children[0].name
    subscript,    // children[0][children[1]]
    slice,        // children[0][children[1]:children[2]:children[3]], each bound may be null
    unary,        // name ("-", "+", "not") children[0]
    binary,       // children[0] name children[1]: + - * / // % ** ~
    logical,      // children[0] name ("and", "or") children[1]: Python's, returning an operand
    compare,      // children[0] ops[0] children[1] ops[1] ...: ==, !=, <, <=, >, >=, in, not in
    conditional,  // children[0] if children[1] else children[2] (null: undefined)
    filter,       // children[0] | name(children[1..], keywords)
    test,         // children[0] is [not] name(children[1..], keywords)
    call,         // children[0](children[1..], keywords)
  };
  Kind kind = Kind::literal;
  int line = 0, column = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  std::vector<std::string> ops;
  bool negated = false;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    text,         // text
    output,       // {{ expr }}
    if_chain,     // branches: (condition, body)...; else_body
    for_loop,     // for targets in expr [if filter]: body; else_body
    set,          // targets (one name, or several to unpack) = expr; or attr: targets[0].attr = expr
    set_block,    // targets[0] = rendered body
    macro,        // name(params with defaults): body
    loop_break,
    loop_continue,
    generation,   // transformers' {% generation %}: renders its body as is
  };
  Kind kind = Kind::text;
  int line = 0, column = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::vector<std::string> targets;
  std::string attr;
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // one per param, null where it has none
};

}  // namespace mm::jinja
