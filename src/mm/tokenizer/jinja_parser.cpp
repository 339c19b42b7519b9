#include "mm/tokenizer/jinja_parser.h"

#include <algorithm>
#include <cmath>

#include "mm/core/error.h"

namespace mm::jinja {
namespace {

// Deep enough for any published template, shallow enough that a hostile one cannot overflow
// the stack.
constexpr int kMaxDepth = 200;

using K = Token::Kind;

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& name) : t_(tokens), name_(name) {}

  Body parse() {
    std::string end;
    Body body = parse_body({}, end);
    return body;
  }

 private:
  const Token& peek(size_t ahead = 0) const { return t_[std::min(pos_ + ahead, t_.size() - 1)]; }
  const Token& next() {
    const Token& tok = peek();
    if (pos_ < t_.size() - 1) ++pos_;
    return tok;
  }
  bool is_op(const char* op, size_t ahead = 0) const { return peek(ahead).kind == K::op && peek(ahead).text == op; }
  bool is_name(const char* n, size_t ahead = 0) const { return peek(ahead).kind == K::name && peek(ahead).text == n; }

  [[noreturn]] void error(const Token& at, const std::string& what) const {
    fail(name_, ":", at.line, ":", at.column, ": ", what);
  }
  static std::string describe(const Token& tok) {
    switch (tok.kind) {
      case K::eof: return "end of template";
      case K::block_end: return "end of tag '%}'";
      case K::var_end: return "end of tag '}}'";
      case K::text: return "text";
      case K::string: return "string literal";
      default: return "'" + tok.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!is_op(op)) error(peek(), std::string("expected '") + op + "', got " + describe(peek()));
    next();
  }
  void expect(K kind, const char* what) {
    if (peek().kind != kind) error(peek(), std::string("expected ") + what + ", got " + describe(peek()));
    next();
  }
  std::string expect_name(const char* what) {
    if (peek().kind != K::name) error(peek(), std::string("expected ") + what + ", got " + describe(peek()));
    return next().text;
  }

  struct DepthGuard {
    DepthGuard(Parser& p, const Token& at) : p_(p) {
      if (++p_.depth_ > kMaxDepth) p_.error(at, "template nested too deeply");
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };

  // Statements up to one of the `ends` tags (consumed with its name; the caller reads the rest of
  // that tag), or to the end of the template when `ends` is empty.
  Body parse_body(std::initializer_list<const char*> ends, std::string& end_found) {
    DepthGuard guard(*this, peek());
    Body body;
    while (true) {
      const Token& tok = peek();
      if (tok.kind == K::eof) {
        if (ends.size() == 0) return body;
        std::string list;
        for (const char* e : ends) list += (list.empty() ? "'" : " or '") + std::string(e) + "'";
        error(tok, "unexpected end of template, expected " + list);
      }
      if (tok.kind == K::text) {
        auto s = make_stmt(Stmt::Kind::text, tok);
        s->text = next().text;
        body.push_back(std::move(s));
      } else if (tok.kind == K::var_begin) {
        next();
        auto s = make_stmt(Stmt::Kind::output, tok);
        s->expr = parse_tuple();
        expect(K::var_end, "'}}'");
        body.push_back(std::move(s));
      } else if (tok.kind == K::block_begin) {
        const Token& tag = peek(1);
        if (tag.kind == K::name && std::any_of(ends.begin(), ends.end(), [&](const char* e) { return tag.text == e; })) {
          next();
          end_found = next().text;
          return body;
        }
        next();
        body.push_back(parse_statement());
      } else {
        error(tok, "unexpected " + describe(tok));
      }
    }
  }

  StmtPtr make_stmt(Stmt::Kind kind, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    s->column = at.column;
    return s;
  }

  StmtPtr parse_statement() {
    const Token& tag = peek();
    if (tag.kind != K::name) error(tag, "expected a tag name, got " + describe(tag));
    const std::string name = next().text;
    std::string end;
    if (name == "if") {
      auto s = make_stmt(Stmt::Kind::if_chain, tag);
      ExprPtr cond = parse_expression();
      while (true) {
        expect(K::block_end, "'%}'");
        Body body = parse_body({"elif", "else", "endif"}, end);
        s->branches.emplace_back(std::move(cond), std::move(body));
        if (end != "elif") break;
        cond = parse_expression();
      }
      if (end == "else") {
        expect(K::block_end, "'%}'");
        s->else_body = parse_body({"endif"}, end);
      }
      expect(K::block_end, "'%}'");
      return s;
    }
    if (name == "for") {
      auto s = make_stmt(Stmt::Kind::for_loop, tag);
      s->targets = parse_targets();
      if (!is_name("in")) error(peek(), "expected 'in' in for loop, got " + describe(peek()));
      next();
      s->expr = parse_tuple(false);
      if (is_name("if")) {
        next();
        s->filter = parse_expression();
      }
      if (is_name("recursive")) error(peek(), "unsupported: recursive for loops");
      expect(K::block_end, "'%}'");
      ++loop_depth_;
      s->body = parse_body({"else", "endfor"}, end);
      --loop_depth_;
      if (end == "else") {
        expect(K::block_end, "'%}'");
        s->else_body = parse_body({"endfor"}, end);
      }
      expect(K::block_end, "'%}'");
      return s;
    }
    if (name == "set") {
      auto s = make_stmt(Stmt::Kind::set, tag);
      if (peek().kind == K::name && is_op(".", 1)) {
        s->targets.push_back(next().text);
        next();
        s->attr = expect_name("an attribute name");
      } else {
        s->targets = parse_targets();
      }
      if (is_op("=")) {
        next();
        s->expr = parse_tuple();
        expect(K::block_end, "'%}'");
        return s;
      }
      if (peek().kind == K::block_end && s->attr.empty() && s->targets.size() == 1) {
        next();
        s->kind = Stmt::Kind::set_block;
        s->body = parse_body({"endset"}, end);
        expect(K::block_end, "'%}'");
        return s;
      }
      error(peek(), "expected '=' in set, got " + describe(peek()));
    }
    if (name == "macro") {
      auto s = make_stmt(Stmt::Kind::macro, tag);
      s->name = expect_name("a macro name");
      expect_op("(");
      while (!is_op(")")) {
        s->params.push_back(expect_name("a parameter name"));
        if (is_op("=")) {
          next();
          s->defaults.push_back(parse_expression());
        } else {
          s->defaults.push_back(nullptr);
        }
        if (!is_op(",")) break;
        next();
      }
      expect_op(")");
      expect(K::block_end, "'%}'");
      const int outer_loops = loop_depth_;
      loop_depth_ = 0;  // a macro body cannot break out of the loop it is defined in
      s->body = parse_body({"endmacro"}, end);
      loop_depth_ = outer_loops;
      if (peek().kind == K::name) next();  // `{% endmacro name %}`
      expect(K::block_end, "'%}'");
      return s;
    }
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) error(tag, "'" + name + "' outside a loop");
      auto s = make_stmt(name == "break" ? Stmt::Kind::loop_break : Stmt::Kind::loop_continue, tag);
      expect(K::block_end, "'%}'");
      return s;
    }
    if (name == "generation") {
      auto s = make_stmt(Stmt::Kind::generation, tag);
      expect(K::block_end, "'%}'");
      s->body = parse_body({"endgeneration"}, end);
      expect(K::block_end, "'%}'");
      return s;
    }
    static const char* const kEndTags[] = {"endif", "elif", "else", "endfor", "endset", "endmacro", "endgeneration", "endraw"};
    for (const char* e : kEndTags)
      if (name == e) error(tag, "unexpected '" + name + "' with no open block to close");
    error(tag, "unsupported tag '" + name + "'");
  }

  // `x`, `k, v`, `(k, v)`
  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    const bool paren = is_op("(");
    if (paren) next();
    names.push_back(expect_name("a variable name"));
    while (is_op(",")) {
      next();
      if (peek().kind != K::name) break;
      names.push_back(next().text);
    }
    if (paren) expect_op(")");
    return names;
  }

  ExprPtr make(Expr::Kind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    return e;
  }

  // An expression, or several separated by commas as a tuple (`set a, b = 1, 2`).
  ExprPtr parse_tuple(bool with_condexpr = true) {
    const Token& at = peek();
    ExprPtr first = with_condexpr ? parse_expression() : parse_or();
    if (!is_op(",")) return first;
    auto tuple = make(Expr::Kind::tuple, at);
    tuple->children.push_back(std::move(first));
    while (is_op(",")) {
      next();
      if (peek().kind == K::block_end || peek().kind == K::var_end) break;
      tuple->children.push_back(with_condexpr ? parse_expression() : parse_or());
    }
    return tuple;
  }

  ExprPtr parse_expression() {
    DepthGuard guard(*this, peek());
    ExprPtr e = parse_or();
    while (is_name("if")) {
      const Token& at = next();
      auto c = make(Expr::Kind::conditional, at);
      c->children.push_back(std::move(e));
      c->children.push_back(parse_or());
      if (is_name("else")) {
        next();
        c->children.push_back(parse_expression());
      } else {
        c->children.push_back(nullptr);
      }
      e = std::move(c);
    }
    return e;
  }

  ExprPtr logical(const char* op, ExprPtr left, ExprPtr right, const Token& at) {
    auto e = make(Expr::Kind::logical, at);
    e->name = op;
    e->children.push_back(std::move(left));
    e->children.push_back(std::move(right));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const Token& at = next();
      e = logical("or", std::move(e), parse_and(), at);
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const Token& at = next();
      e = logical("and", std::move(e), parse_not(), at);
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this, peek());
      const Token& at = next();
      auto e = make(Expr::Kind::unary, at);
      e->name = "not";
      e->children.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& at = peek();
    ExprPtr first = parse_math1();
    ExprPtr chain;
    while (true) {
      std::string op;
      if (peek().kind == K::op && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                   peek().text == "<=" || peek().text == ">" || peek().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      if (!chain) {
        chain = make(Expr::Kind::compare, at);
        chain->children.push_back(std::move(first));
      }
      chain->ops.push_back(op);
      chain->children.push_back(parse_math1());
    }
    return chain ? std::move(chain) : std::move(first);
  }

  ExprPtr binary(std::string op, ExprPtr left, ExprPtr right, const Token& at) {
    auto e = make(Expr::Kind::binary, at);
    e->name = std::move(op);
    e->children.push_back(std::move(left));
    e->children.push_back(std::move(right));
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = next();
      e = binary(at.text, std::move(e), parse_concat(), at);
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const Token& at = next();
      e = binary("~", std::move(e), parse_math2(), at);
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = next();
      e = binary(at.text, std::move(e), parse_pow(), at);
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary();
    while (is_op("**")) {
      const Token& at = next();
      e = binary("**", std::move(e), parse_unary(), at);
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter = true) {
    DepthGuard guard(*this, peek());
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& at = next();
      e = make(Expr::Kind::unary, at);
      e->name = at.text;
      e->children.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& tok = peek();
    switch (tok.kind) {
      case K::name: {
        next();
        auto e = make(Expr::Kind::literal, tok);
        if (tok.text == "true" || tok.text == "True") e->value = Value::boolean(true);
        else if (tok.text == "false" || tok.text == "False") e->value = Value::boolean(false);
        else if (tok.text == "none" || tok.text == "None") e->value = Value::none();
        else {
          e->kind = Expr::Kind::name;
          e->name = tok.text;
        }
        return e;
      }
      case K::string: {
        std::string s;
        while (peek().kind == K::string) s += next().text;  // adjacent literals concatenate
        auto e = make(Expr::Kind::literal, tok);
        e->value = Value::string(s);
        return e;
      }
      case K::integer: {
        next();
        auto e = make(Expr::Kind::literal, tok);
        try {
          e->value = Value::integer(std::stoll(tok.text));
        } catch (const std::exception&) {
          error(tok, "integer literal out of range: " + tok.text);
        }
        return e;
      }
      case K::floating: {
        next();
        auto e = make(Expr::Kind::literal, tok);
        try {
          e->value = Value::floating(std::stod(tok.text));
        } catch (const std::exception&) {
          e->value = Value::floating(HUGE_VAL);  // Python reads 1e999 as inf
        }
        return e;
      }
      case K::op: {
        if (tok.text == "(") {
          next();
          if (is_op(")")) {
            next();
            return make(Expr::Kind::tuple, tok);
          }
          ExprPtr first = parse_expression();
          if (is_op(")")) {
            next();
            return first;
          }
          auto tuple = make(Expr::Kind::tuple, tok);
          tuple->children.push_back(std::move(first));
          while (is_op(",")) {
            next();
            if (is_op(")")) break;
            tuple->children.push_back(parse_expression());
          }
          expect_op(")");
          return tuple;
        }
        if (tok.text == "[") {
          next();
          auto list = make(Expr::Kind::list, tok);
          while (!is_op("]")) {
            list->children.push_back(parse_expression());
            if (!is_op(",")) break;
            next();
          }
          expect_op("]");
          return list;
        }
        if (tok.text == "{") {
          next();
          auto dict = make(Expr::Kind::dict, tok);
          while (!is_op("}")) {
            dict->children.push_back(parse_expression());
            expect_op(":");
            dict->children.push_back(parse_expression());
            if (!is_op(",")) break;
            next();
          }
          expect_op("}");
          return dict;
        }
        break;
      }
      default: break;
    }
    error(tok, "unexpected " + describe(tok) + " in expression");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        const Token& at = next();
        if (peek().kind == K::integer) {
          auto sub = make(Expr::Kind::subscript, at);
          sub->children.push_back(std::move(e));
          auto index = make(Expr::Kind::literal, peek());
          try {
            index->value = Value::integer(std::stoll(peek().text));
          } catch (const std::exception&) {
            error(peek(), "index out of range: " + peek().text);
          }
          next();
          sub->children.push_back(std::move(index));
          e = std::move(sub);
        } else {
          auto attr = make(Expr::Kind::attr, at);
          attr->name = expect_name("an attribute name after '.'");
          attr->children.push_back(std::move(e));
          e = std::move(attr);
        }
      } else if (is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    const Token& at = next();  // '['
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression();
      if (is_op("]")) {
        next();
        auto sub = make(Expr::Kind::subscript, at);
        sub->children.push_back(std::move(obj));
        sub->children.push_back(std::move(start));
        return sub;
      }
      if (!is_op(":")) error(peek(), "expected ']' or ':' in subscript, got " + describe(peek()));
    }
    next();  // ':'
    auto slice = make(Expr::Kind::slice, at);
    slice->children.push_back(std::move(obj));
    slice->children.push_back(std::move(start));
    slice->children.push_back(is_op("]") || is_op(":") ? nullptr : parse_expression());
    ExprPtr step;
    if (is_op(":")) {
      next();
      if (!is_op("]")) step = parse_expression();
    }
    slice->children.push_back(std::move(step));
    expect_op("]");
    return slice;
  }

  // Arguments after '(' into e->children (after any already there) and e->keywords.
  void parse_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (is_op("*") || is_op("**")) error(peek(), "unsupported: *args and **kwargs in calls");
      if (peek().kind == K::name && is_op("=", 1)) {
        std::string key = next().text;
        next();
        e.keywords.emplace_back(std::move(key), parse_expression());
      } else {
        if (!e.keywords.empty()) error(peek(), "positional argument follows keyword argument");
        e.children.push_back(parse_expression());
      }
      if (!is_op(",")) break;
      next();
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto call = make(Expr::Kind::call, peek());
    call->line = callee->line;  // errors point at what is called, not at its '('
    call->column = callee->column;
    call->children.push_back(std::move(callee));
    parse_args(*call);
    return call;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        const Token& at = next();
        auto f = make(Expr::Kind::filter, at);
        f->name = expect_name("a filter name after '|'");
        f->children.push_back(std::move(e));
        if (is_op("(")) parse_args(*f);
        e = std::move(f);
      } else if (is_name("is")) {
        const Token& at = next();
        auto t = make(Expr::Kind::test, at);
        if (is_name("not")) {
          next();
          t->negated = true;
        }
        t->name = expect_name("a test name after 'is'");  // `none`, `true`, `false` are tests here
        t->children.push_back(std::move(e));
        if (is_op("(")) {
          parse_args(*t);
        } else if ((peek().kind == K::name || peek().kind == K::string || peek().kind == K::integer ||
                    peek().kind == K::floating || is_op("(") || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) error(peek(), "tests cannot be chained with 'is'");
          t->children.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(t);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  const std::vector<Token>& t_;
  const std::string& name_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Body parse_template(const std::vector<Token>& tokens, const std::string& name) {
  return Parser(tokens, name).parse();
}

}  // namespace mm::jinja
