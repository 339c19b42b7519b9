#include "mm/tokenizer/jinja_template.h"

#include <cmath>
#include <ctime>
#include <optional>
#include <unordered_map>

#include "mm/core/error.h"
#include "mm/tokenizer/jinja_ast.h"
#include "mm/tokenizer/jinja_builtins.h"
#include "mm/tokenizer/jinja_lexer.h"
#include "mm/tokenizer/jinja_parser.h"

namespace mm {
namespace jinja {
namespace {

// A template must not exhaust the stack or memory: jinja2 stops at Python's recursion limit and
// the sandbox caps range() at 100000 items; we stop earlier, with a message.
constexpr int kMaxMacroDepth = 100;
constexpr int kMaxLoopDepth = 100;
constexpr std::int64_t kMaxRange = 100000;
// Blocks, expressions and macro calls nested at render time, together: each limit alone would
// still let a macro recursing through deeply nested expressions overflow the stack.
constexpr int kMaxRenderDepth = 1000;
constexpr size_t kMaxStringBytes = size_t{1} << 28;

// Variables: a frame per macro call and per loop iteration (jinja2 scoping: `set` inside a loop
// does not leak out of it, hence namespace()); `if` opens none.
struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent.get()) {
      const auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { normal, loop_break, loop_continue };

struct DepthGuard {
  DepthGuard(int& depth, int limit, const std::string& what) : depth_(depth) {
    if (depth_ >= limit) throw Failure(what + " nested deeper than " + std::to_string(limit));
    ++depth_;
  }
  ~DepthGuard() { --depth_; }
  int& depth_;
};

[[noreturn]] void throw_undefined(const Value& v) {
  throw Failure(v.s.empty() ? "undefined value" : v.s);
}

bool add_overflows(std::int64_t a, std::int64_t b, std::int64_t* r) { return __builtin_add_overflow(a, b, r); }
bool sub_overflows(std::int64_t a, std::int64_t b, std::int64_t* r) { return __builtin_sub_overflow(a, b, r); }
bool mul_overflows(std::int64_t a, std::int64_t b, std::int64_t* r) { return __builtin_mul_overflow(a, b, r); }

std::int64_t as_int(const Value& v) { return v.kind == Value::Kind::boolean ? v.b : v.i; }

Value repeat(const Value& seq, std::int64_t times) {
  times = std::max<std::int64_t>(times, 0);
  const size_t unit = seq.is_string() ? seq.s.size() : seq.list->size() * 16;
  if (times > 0 && unit > kMaxStringBytes / static_cast<size_t>(times)) throw Failure("repetition too large");
  if (seq.is_string()) {
    std::string out;
    for (std::int64_t k = 0; k < times; ++k) out += seq.s;
    return Value::string(out);
  }
  List out;
  for (std::int64_t k = 0; k < times; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return Value::make_list(std::move(out), seq.is_tuple);
}

// Python's binary operators on numbers, strings and lists.
Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s = a.str() + b.str();
    if (s.size() > kMaxStringBytes) throw Failure("string too large");
    return Value::string(std::move(s));
  }
  if (a.is_undefined()) throw_undefined(a);
  if (b.is_undefined()) throw_undefined(b);
  const auto unsupported = [&]() -> Value {
    throw Failure("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
  };
  const bool ints = (a.kind == Value::Kind::integer || a.kind == Value::Kind::boolean) &&
                    (b.kind == Value::Kind::integer || b.kind == Value::Kind::boolean);
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      if (a.s.size() + b.s.size() > kMaxStringBytes) throw Failure("string too large");
      return Value::string(a.s + b.s);
    }
    if (a.is_list() && b.is_list() && a.is_tuple == b.is_tuple) {
      List out = a.items();
      out.insert(out.end(), b.list->begin(), b.list->end());
      return Value::make_list(std::move(out), a.is_tuple);
    }
    if (!a.is_number() || !b.is_number()) return unsupported();
    std::int64_t r;
    if (!ints) return Value::floating(a.as_double() + b.as_double());
    if (add_overflows(as_int(a), as_int(b), &r)) throw Failure("integer overflow");
    return Value::integer(r);
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && (b.kind == Value::Kind::integer || b.kind == Value::Kind::boolean)) return repeat(a, as_int(b));
    if ((b.is_string() || b.is_list()) && (a.kind == Value::Kind::integer || a.kind == Value::Kind::boolean)) return repeat(b, as_int(a));
    if (!a.is_number() || !b.is_number()) return unsupported();
    std::int64_t r;
    if (!ints) return Value::floating(a.as_double() * b.as_double());
    if (mul_overflows(as_int(a), as_int(b), &r)) throw Failure("integer overflow");
    return Value::integer(r);
  }
  if (op == "%" && a.is_string()) throw Failure("unsupported: printf-style string formatting with '%'");
  if (!a.is_number() || !b.is_number()) return unsupported();
  if (op == "-") {
    std::int64_t r;
    if (!ints) return Value::floating(a.as_double() - b.as_double());
    if (sub_overflows(as_int(a), as_int(b), &r)) throw Failure("integer overflow");
    return Value::integer(r);
  }
  if (op == "/") {
    if (b.as_double() == 0) throw Failure("division by zero");
    return Value::floating(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (b.as_double() == 0) throw Failure(ints ? "integer division or modulo by zero" : "float division by zero");
    if (ints) {
      const std::int64_t x = as_int(a), y = as_int(b);
      if (x == INT64_MIN && y == -1) throw Failure("integer overflow");
      std::int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value::integer(op == "//" ? q : m);
    }
    const double x = a.as_double(), y = b.as_double();
    if (op == "//") return Value::floating(std::floor(x / y));
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value::floating(m);
  }
  if (op == "**") {
    if (ints && as_int(b) >= 0) {
      std::int64_t r = 1, base = as_int(a);
      for (std::int64_t e = as_int(b); e > 0; --e)
        if (mul_overflows(r, base, &r)) throw Failure("integer overflow");
      return Value::integer(r);
    }
    return Value::floating(std::pow(a.as_double(), b.as_double()));
  }
  return unsupported();
}

class Renderer {
 public:
  Renderer(const std::string& name, std::optional<std::int64_t> now) : name_(name), now_(now) { install_globals(); }

  Flow exec(const Body& body, const ScopePtr& scope, std::string& out) {
    DepthGuard guard(render_depth_, kMaxRenderDepth, "blocks, expressions and macro calls");
    for (const auto& stmt : body) {
      const Flow flow = exec_one(*stmt, scope, out);
      if (flow != Flow::normal) return flow;
    }
    return Flow::normal;
  }

 private:
  [[noreturn]] void fail_at(int line, int column, const std::string& what) const {
    fail(name_, ":", line, ":", column, ": ", what);
  }

  Flow exec_one(const Stmt& s, const ScopePtr& scope, std::string& out) {
    try {
      return exec_stmt(s, scope, out);
    } catch (const Failure& e) {
      fail_at(s.line, s.column, e.what());
    }
  }

  Flow exec_stmt(const Stmt& s, const ScopePtr& scope, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::text: out += s.text; return Flow::normal;
      case Stmt::Kind::output: output(*s.expr, scope, out); return Flow::normal;
      case Stmt::Kind::if_chain:
        for (const auto& [cond, body] : s.branches)
          if (eval(*cond, scope).truthy()) return exec(body, scope, out);
        return exec(s.else_body, scope, out);
      case Stmt::Kind::for_loop: return run_for(s, scope, out);
      case Stmt::Kind::set:
      case Stmt::Kind::set_block:
      case Stmt::Kind::macro: assign(s, scope); return Flow::normal;
      case Stmt::Kind::loop_break: return Flow::loop_break;
      case Stmt::Kind::loop_continue: return Flow::loop_continue;
      case Stmt::Kind::generation: return exec(s.body, scope, out);
    }
    return Flow::normal;
  }

  [[gnu::noinline]] void output(const Expr& e, const ScopePtr& scope, std::string& out) { out += eval(e, scope).str(); }

  [[gnu::noinline]] void assign(const Stmt& s, const ScopePtr& scope) {
    if (s.kind == Stmt::Kind::set_block) {
      std::string text;
      exec(s.body, scope, text);
      scope->vars[s.targets[0]] = Value::string(std::move(text));
    } else if (s.kind == Stmt::Kind::macro) {
      std::weak_ptr<Scope> closure = scope;
      const Stmt* macro = &s;
      scope->vars[s.name] = Value::function(s.name, [this, macro, closure](Args& args) { return call_macro(*macro, closure, args); });
    } else if (!s.attr.empty()) {
      Value v = eval(*s.expr, scope);
      const Value* target = scope->find(s.targets[0]);
      if (!target || target->kind != Value::Kind::name_space)
        throw Failure("cannot assign attribute '" + s.attr + "' on non-namespace object '" + s.targets[0] + "'");
      target->dict->set(s.attr, std::move(v));
    } else {
      bind(*scope, s.targets, eval(*s.expr, scope));
    }
  }

  static void bind(Scope& scope, const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) {
      scope.vars[targets[0]] = v;
      return;
    }
    const List items = iterate(v);
    if (items.size() != targets.size())
      throw Failure(std::string(items.size() < targets.size() ? "not enough" : "too many") + " values to unpack (expected " +
                    std::to_string(targets.size()) + ", got " + std::to_string(items.size()) + ")");
    for (size_t k = 0; k < targets.size(); ++k) scope.vars[targets[k]] = items[k];
  }

  // `loop` in iteration k. Kept out of line (as run_for and set are) so that exec_stmt, which
  // recurses once per nested block, keeps a small stack frame.
  [[gnu::noinline]] static Value loop_variable(const List& items, std::int64_t k, const Value& cycle) {
    const auto n = static_cast<std::int64_t>(items.size());
    Dict loop;
    loop.items.reserve(12);
    loop.items.emplace_back("index", Value::integer(k + 1));
    loop.items.emplace_back("index0", Value::integer(k));
    loop.items.emplace_back("revindex", Value::integer(n - k));
    loop.items.emplace_back("revindex0", Value::integer(n - k - 1));
    loop.items.emplace_back("first", Value::boolean(k == 0));
    loop.items.emplace_back("last", Value::boolean(k == n - 1));
    loop.items.emplace_back("length", Value::integer(n));
    loop.items.emplace_back("depth", Value::integer(1));
    loop.items.emplace_back("depth0", Value::integer(0));
    loop.items.emplace_back("previtem", k > 0 ? items[static_cast<size_t>(k - 1)] : Value::undefined("there is no previous item"));
    loop.items.emplace_back("nextitem", k + 1 < n ? items[static_cast<size_t>(k + 1)] : Value::undefined("there is no next item"));
    loop.items.emplace_back("cycle", cycle);
    return Value::make_dict(std::move(loop));
  }

  [[gnu::noinline]] Flow run_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
    DepthGuard guard(loop_depth_, kMaxLoopDepth, "for loops");
    List items = iterate(eval(*s.expr, scope));
    if (s.filter) {
      List kept;
      for (const Value& item : items) {
        auto frame = std::make_shared<Scope>();
        frame->parent = scope;
        bind(*frame, s.targets, item);
        if (eval(*s.filter, frame).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec(s.else_body, scope, out);
    const auto n = static_cast<std::int64_t>(items.size());
    for (std::int64_t k = 0; k < n; ++k) {
      const Value cycle = Value::function("loop.cycle", [k](Args& a) {
        if (a.positional.empty() || !a.keywords.empty()) throw Failure("loop.cycle() needs at least one positional argument");
        return a.positional[static_cast<size_t>(k) % a.positional.size()];
      });
      auto frame = std::make_shared<Scope>();
      frame->parent = scope;
      bind(*frame, s.targets, items[static_cast<size_t>(k)]);
      frame->vars["loop"] = loop_variable(items, k, cycle);
      if (exec(s.body, frame, out) == Flow::loop_break) break;
    }
    return Flow::normal;
  }

  Value call_macro(const Stmt& m, const std::weak_ptr<Scope>& closure, Args& args) {
    const ScopePtr parent = closure.lock();
    if (!parent) throw Failure("macro '" + m.name + "' called after the block that defined it ended");
    DepthGuard guard(macro_depth_, kMaxMacroDepth, "macro calls");
    if (args.positional.size() > m.params.size())
      throw Failure("macro '" + m.name + "' takes not more than " + std::to_string(m.params.size()) + " argument(s)");
    auto frame = std::make_shared<Scope>();
    frame->parent = parent;
    for (const auto& [key, v] : args.keywords)
      if (std::find(m.params.begin(), m.params.end(), key) == m.params.end())
        throw Failure("macro '" + m.name + "' takes no keyword argument '" + key + "'");
    for (size_t k = 0; k < m.params.size(); ++k) {
      const std::string& p = m.params[k];
      std::optional<Value> v;
      if (k < args.positional.size()) v = args.positional[k];
      for (const auto& [key, kv] : args.keywords)
        if (key == p) {
          if (v) throw Failure("macro '" + m.name + "' got multiple values for argument '" + p + "'");
          v = kv;
        }
      if (!v) v = m.defaults[k] ? eval(*m.defaults[k], frame) : Value::undefined("parameter '" + p + "' was not provided");
      frame->vars[p] = *v;
    }
    std::string out;
    exec(m.body, frame, out);
    return Value::string(std::move(out));
  }

  Value eval(const Expr& e, const ScopePtr& scope) {
    try {
      DepthGuard guard(render_depth_, kMaxRenderDepth, "blocks, expressions and macro calls");
      return eval_expr(e, scope);
    } catch (const Failure& f) {
      fail_at(e.line, e.column, f.what());
    }
  }

  Args eval_args(const Expr& e, size_t first, const ScopePtr& scope) {
    Args args;
    for (size_t k = first; k < e.children.size(); ++k) args.positional.push_back(eval(*e.children[k], scope));
    for (const auto& [key, v] : e.keywords) args.keywords.emplace_back(key, eval(*v, scope));
    return args;
  }

  Value eval_expr(const Expr& e, const ScopePtr& scope) {
    using K = Expr::Kind;
    switch (e.kind) {
      case K::literal: return e.value;
      case K::name: {
        if (const Value* v = scope->find(e.name)) return *v;
        const auto g = globals_.find(e.name);
        if (g != globals_.end()) return g->second;
        return Value::undefined("'" + e.name + "' is undefined");
      }
      case K::list:
      case K::tuple: {
        List items;
        for (const auto& c : e.children) items.push_back(eval(*c, scope));
        return Value::make_list(std::move(items), e.kind == K::tuple);
      }
      case K::dict: {
        Dict d;
        for (size_t k = 0; k + 1 < e.children.size(); k += 2) {
          const Value key = eval(*e.children[k], scope);
          if (!key.is_string()) throw Failure("dict keys must be strings here, got " + key.type_name());
          d.set(key.s, eval(*e.children[k + 1], scope));
        }
        return Value::make_dict(std::move(d));
      }
      case K::attr: return get_attr(eval(*e.children[0], scope), e.name);
      case K::subscript: return get_item(eval(*e.children[0], scope), eval(*e.children[1], scope));
      case K::slice: {
        const auto bound = [&](size_t k) { return e.children[k] ? eval(*e.children[k], scope) : Value::none(); };
        const Value obj = eval(*e.children[0], scope);
        if (obj.is_undefined()) throw_undefined(obj);
        return get_slice(obj, bound(1), bound(2), bound(3));
      }
      case K::unary: {
        const Value v = eval(*e.children[0], scope);
        if (e.name == "not") return Value::boolean(!v.truthy());
        if (v.is_undefined()) throw_undefined(v);
        if (v.kind == Value::Kind::floating) return Value::floating(e.name == "-" ? -v.f : v.f);
        if (v.kind == Value::Kind::integer || v.kind == Value::Kind::boolean) {
          if (e.name == "-" && as_int(v) == INT64_MIN) throw Failure("integer overflow");
          return Value::integer(e.name == "-" ? -as_int(v) : as_int(v));
        }
        throw Failure("bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
      }
      case K::binary: return binary_op(e.name, eval(*e.children[0], scope), eval(*e.children[1], scope));
      case K::logical: {
        Value left = eval(*e.children[0], scope);
        if (e.name == "and" ? !left.truthy() : left.truthy()) return left;
        return eval(*e.children[1], scope);
      }
      case K::compare: {
        Value left = eval(*e.children[0], scope);
        for (size_t k = 0; k < e.ops.size(); ++k) {
          Value right = eval(*e.children[k + 1], scope);
          const std::string& op = e.ops[k];
          bool ok;
          if (op == "==") ok = equal(left, right);
          else if (op == "!=") ok = !equal(left, right);
          else if (op == "in") ok = contains(right, left);
          else if (op == "not in") ok = !contains(right, left);
          else {
            if (left.is_undefined()) throw_undefined(left);
            if (right.is_undefined()) throw_undefined(right);
            const int c = compare(left, right);
            ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
          }
          if (!ok) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case K::conditional:
        if (eval(*e.children[1], scope).truthy()) return eval(*e.children[0], scope);
        return e.children[2] ? eval(*e.children[2], scope) : Value::undefined("the condition of an inline if was false and it has no else");
      case K::filter: {
        const Value v = eval(*e.children[0], scope);
        Args args = eval_args(e, 1, scope);
        return apply_filter(e.name, v, args);
      }
      case K::test: {
        const Value v = eval(*e.children[0], scope);
        Args args = eval_args(e, 1, scope);
        return Value::boolean(apply_test(e.name, v, args) != e.negated);
      }
      case K::call: {
        const Value callee = eval(*e.children[0], scope);
        Args args = eval_args(e, 1, scope);
        if (callee.kind == Value::Kind::function) return (*callee.fn)(args);
        if (callee.is_undefined()) throw_undefined(callee);
        throw Failure("'" + callee.type_name() + "' object is not callable");
      }
    }
    throw Failure("unknown expression");
  }

  void install_globals() {
    globals_["range"] = Value::function("range", [](Args& a) {
      if (!a.keywords.empty() || a.positional.empty() || a.positional.size() > 3) throw Failure("range() takes 1 to 3 positional arguments");
      std::vector<std::int64_t> n;
      for (const Value& v : a.positional) {
        if (v.kind != Value::Kind::integer && v.kind != Value::Kind::boolean)
          throw Failure("'" + v.type_name() + "' object cannot be interpreted as an integer");
        n.push_back(as_int(v));
      }
      const std::int64_t start = n.size() == 1 ? 0 : n[0], stop = n.size() == 1 ? n[0] : n[1], step = n.size() == 3 ? n[2] : 1;
      if (step == 0) throw Failure("range() arg 3 must not be zero");
      const double count = std::max(0.0, std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step)));
      if (count > kMaxRange) throw Failure("range too big, the sandbox allows " + std::to_string(kMaxRange) + " items");
      List out;
      for (std::int64_t k = 0; k < static_cast<std::int64_t>(count); ++k) out.push_back(Value::integer(start + k * step));
      return Value::make_list(std::move(out));
    });
    const auto dict_from = [](const std::string& what, Args& a) {
      Dict d;
      if (a.positional.size() > 1) throw Failure(what + "() takes at most 1 positional argument");
      if (!a.positional.empty()) {
        const Value& init = a.positional[0];
        if (!init.is_dict() && init.kind != Value::Kind::name_space) throw Failure(what + "() needs a mapping, got " + init.type_name());
        d = *init.dict;
      }
      for (const auto& [k, v] : a.keywords) d.set(k, v);
      return d;
    };
    globals_["namespace"] = Value::function("namespace", [dict_from](Args& a) { return Value::make_namespace(dict_from("namespace", a)); });
    globals_["dict"] = Value::function("dict", [dict_from](Args& a) { return Value::make_dict(dict_from("dict", a)); });
    globals_["raise_exception"] = Value::function("raise_exception", [](Args& a) -> Value {
      throw Failure("raise_exception: " + (a.positional.empty() ? std::string() : a.positional[0].str()));
    });
    globals_["strftime_now"] = Value::function("strftime_now", [this](Args& a) {
      if (a.positional.size() != 1 || !a.positional[0].is_string() || !a.keywords.empty())
        throw Failure("strftime_now() takes one format string");
      const std::time_t t = now_ ? static_cast<std::time_t>(*now_) : std::time(nullptr);
      std::tm tm{};
      if (now_) gmtime_r(&t, &tm);
      else localtime_r(&t, &tm);
      const std::string& format = a.positional[0].s;
      if (format.empty()) return Value::string("");
      std::string buf(256 + format.size() * 8, '\0');
      const size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &tm);
      if (n == 0) throw Failure("strftime_now: format produced nothing or too much: '" + format + "'");
      buf.resize(n);
      return Value::string(buf);
    });
  }

  const std::string& name_;
  std::optional<std::int64_t> now_;
  std::unordered_map<std::string, Value> globals_;
  int macro_depth_ = 0;
  int loop_depth_ = 0;
  int render_depth_ = 0;
};

// Filters and tests are resolved when the template is parsed (as jinja2 compiles them), so an
// unsupported one fails on load, not on the first conversation that reaches it.
void check_names(const Expr* e, const std::string& name) {
  if (!e) return;
  if (e->kind == Expr::Kind::filter && !has_filter(e->name))
    fail(name, ":", e->line, ":", e->column, ": unsupported filter '", e->name, "'");
  if (e->kind == Expr::Kind::test && !has_test(e->name))
    fail(name, ":", e->line, ":", e->column, ": unsupported test '", e->name, "'");
  for (const auto& c : e->children) check_names(c.get(), name);
  for (const auto& [k, v] : e->keywords) check_names(v.get(), name);
}

void check_names(const Body& body, const std::string& name) {
  for (const auto& s : body) {
    check_names(s->expr.get(), name);
    check_names(s->filter.get(), name);
    for (const auto& [cond, b] : s->branches) {
      check_names(cond.get(), name);
      check_names(b, name);
    }
    for (const auto& d : s->defaults) check_names(d.get(), name);
    check_names(s->body, name);
    check_names(s->else_body, name);
  }
}

}  // namespace
}  // namespace jinja

JinjaTemplate::JinjaTemplate(std::string source, std::string name) : name_(std::move(name)) {
  auto body = std::make_shared<jinja::Body>(jinja::parse_template(jinja::lex_template(source, name_), name_));
  jinja::check_names(*body, name_);
  body_ = std::move(body);
}

JinjaTemplate::~JinjaTemplate() = default;
JinjaTemplate::JinjaTemplate(const JinjaTemplate&) = default;
JinjaTemplate& JinjaTemplate::operator=(const JinjaTemplate&) = default;
JinjaTemplate::JinjaTemplate(JinjaTemplate&&) noexcept = default;
JinjaTemplate& JinjaTemplate::operator=(JinjaTemplate&&) noexcept = default;

std::string JinjaTemplate::render(const nlohmann::ordered_json& context) const {
  MM_CHECK(context.is_object(), name_, ": the context of a template must be a JSON object, got ", context.type_name());
  std::optional<std::int64_t> now;
  auto root = std::make_shared<jinja::Scope>();
  try {
    for (const auto& [key, value] : context.items()) root->vars[key] = jinja::Value::from_json(value);
  } catch (const jinja::Failure& e) {
    fail(name_, ": context: ", e.what());
  }
  if (context.contains("__now__")) {
    MM_CHECK(context["__now__"].is_number_integer(), name_, ": context key __now__ must be an integer (seconds since the epoch)");
    now = context["__now__"].get<std::int64_t>();
  }
  jinja::Renderer renderer(name_, now);
  std::string out;
  renderer.exec(*body_, root, out);
  return out;
}

std::string JinjaTemplate::render(const nlohmann::json& context) const {
  return render(nlohmann::ordered_json::parse(context.dump()));
}

}  // namespace mm
