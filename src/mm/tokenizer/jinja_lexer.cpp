#include "mm/tokenizer/jinja_lexer.h"

#include <algorithm>
#include <cstring>

#include "mm/core/error.h"

namespace mm::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::string normalize_newlines(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      out += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      out += source[k];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

void append_utf8(std::string& out, unsigned cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Lexer {
 public:
  Lexer(const std::string& source, const std::string& name) : src_(normalize_newlines(source)), name_(name) {
    line_starts_.push_back(0);
    for (size_t k = 0; k < src_.size(); ++k)
      if (src_[k] == '\n') line_starts_.push_back(k + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;  // jinja2 lstrips a tag on the template's first line too
    while (pos < src_.size()) {
      const size_t start = find_tag(pos);
      std::string text = src_.substr(pos, start - pos);
      if (start == std::string::npos) {
        emit_text(text, pos);
        break;
      }
      const char kind = src_[start + 1];  // '{', '%' or '#'
      const char sign = start + 2 < src_.size() ? src_[start + 2] : '\0';
      if (sign == '-') {
        size_t end = text.size();
        while (end > 0 && is_space(text[end - 1])) --end;
        text.resize(end);
      } else if (kind != '{' && sign != '+') {
        const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((l_pos > 0 || line_starting) && text.find_first_not_of(" \t", l_pos) == std::string::npos)
          text.resize(l_pos);
      }
      emit_text(text, pos);
      size_t body = start + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        pos = close_comment(start, body);
      } else if (kind == '%' && is_raw(body)) {
        pos = raw_block(start, body);
      } else {
        pos = tag(kind, start, body);
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    tokens_.push_back({Token::Kind::eof, "", line_at(src_.size()), column_at(src_.size())});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t k = src_.find('{', from); k != std::string::npos; k = src_.find('{', k + 1))
      if (k + 1 < src_.size() && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
    return std::string::npos;
  }

  int line_at(size_t pos) const {
    return static_cast<int>(std::upper_bound(line_starts_.begin(), line_starts_.end(), pos) - line_starts_.begin());
  }
  int column_at(size_t pos) const { return static_cast<int>(pos - line_starts_[line_at(pos) - 1]) + 1; }

  [[noreturn]] void error(size_t pos, const std::string& what) {
    const int line = line_at(pos);
    fail(name_, ":", line, ":", column_at(pos), ": ", what);
  }

  void emit_text(const std::string& text, size_t pos) {
    if (text.empty()) return;
    const int line = line_at(pos);
    tokens_.push_back({Token::Kind::text, text, line, column_at(pos)});
  }

  void push(Token::Kind kind, std::string text, size_t pos) {
    const int line = line_at(pos);
    tokens_.push_back({kind, std::move(text), line, column_at(pos)});
  }

  // After a block or comment: `-` strips all following whitespace, `+` keeps it, otherwise
  // trim_blocks drops one newline.
  size_t after_block_end(size_t end, bool minus, bool plus) {
    if (minus) {
      while (end < src_.size() && is_space(src_[end])) ++end;
    } else if (!plus && end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    return end;
  }

  size_t close_comment(size_t start, size_t body) {
    const size_t close = src_.find("#}", body);
    if (close == std::string::npos) error(start, "unclosed comment");
    const bool minus = close > body && src_[close - 1] == '-';
    const bool plus = close > body && src_[close - 1] == '+';
    return after_block_end(close + 2, minus, plus);
  }

  size_t skip_spaces(size_t p) const {
    while (p < src_.size() && is_space(src_[p])) ++p;
    return p;
  }

  bool is_raw(size_t body) const {
    const size_t p = skip_spaces(body);
    if (src_.compare(p, 3, "raw") != 0) return false;
    const size_t q = skip_spaces(p + 3);
    return src_.compare(q, 2, "%}") == 0 || src_.compare(q, 3, "-%}") == 0;
  }

  size_t raw_block(size_t start, size_t body) {
    size_t p = skip_spaces(skip_spaces(body) + 3);
    if (src_[p] == '-') p = skip_spaces(p + 3);  // raw begin: `-%}` strips, `%}` keeps the newline
    else p += 2;
    for (size_t k = src_.find("{%", p); k != std::string::npos; k = src_.find("{%", k + 2)) {
      size_t q = k + 2;
      const char sign = src_[q];
      if (sign == '-' || sign == '+') ++q;
      q = skip_spaces(q);
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q = skip_spaces(q + 6);
      const bool minus = src_.compare(q, 3, "-%}") == 0, plus = src_.compare(q, 3, "+%}") == 0;
      if (!minus && !plus && src_.compare(q, 2, "%}") != 0) continue;
      std::string text = src_.substr(p, k - p);
      if (sign == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (sign != '+') {
        const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if (l_pos > 0 && text.find_first_not_of(" \t", l_pos) == std::string::npos) text.resize(l_pos);
      }
      emit_text(text, p);
      return after_block_end(q + (minus || plus ? 3 : 2), minus, plus);
    }
    error(start, "missing endraw for raw block");
  }

  // Lexes the expression tokens of a `{{ }}` or `{% %}` tag up to its end marker; the marker only
  // counts outside brackets, as in jinja2, so `{{ {'a': {'b': 1}} }}` is one tag.
  size_t tag(char kind, size_t start, size_t p) {
    const bool block = kind == '%';
    push(block ? Token::Kind::block_begin : Token::Kind::var_begin, "", start);
    const char* close = block ? "%}" : "}}";
    std::vector<char> brackets;
    while (true) {
      p = skip_spaces(p);
      if (p >= src_.size()) error(start, block ? "unclosed block tag '{%'" : "unclosed variable tag '{{'");
      if (brackets.empty()) {
        const bool minus = src_[p] == '-' && src_.compare(p + 1, 2, close) == 0;
        const bool plus = block && src_[p] == '+' && src_.compare(p + 1, 2, close) == 0;
        if (minus || plus || src_.compare(p, 2, close) == 0) {
          push(block ? Token::Kind::block_end : Token::Kind::var_end, "", p);
          const size_t end = p + (minus || plus ? 3 : 2);
          if (block) return after_block_end(end, minus, plus);
          if (!minus) return end;
          return skip_spaces(end);
        }
      }
      const char c = src_[p];
      if (is_name_start(c)) {
        size_t q = p;
        while (q < src_.size() && (is_name_start(src_[q]) || is_digit(src_[q]))) ++q;
        push(Token::Kind::name, src_.substr(p, q - p), p);
        p = q;
      } else if (is_digit(c)) {
        p = number(p);
      } else if (c == '\'' || c == '"') {
        p = string(p);
      } else {
        static const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "*", "/", "%", "~",
                                           "<",  ">",  "=",  ".",  ",",  ":",  "|", "(", ")", "[", "]", "{", "}"};
        const char* op = nullptr;
        for (const char* o : kOps)
          if (src_.compare(p, std::strlen(o), o) == 0) {
            op = o;
            break;
          }
        if (!op) error(p, std::string("unexpected character '") + c + "'");
        if (c == '(' || c == '[' || c == '{') brackets.push_back(c);
        if (c == ')' || c == ']' || c == '}') {
          const char open = c == ')' ? '(' : c == ']' ? '[' : '{';
          if (brackets.empty() || brackets.back() != open) error(p, std::string("unexpected '") + c + "'");
          brackets.pop_back();
        }
        push(Token::Kind::op, op, p);
        p += std::strlen(op);
      }
    }
  }

  size_t digits(size_t p) const {
    while (p < src_.size() && (is_digit(src_[p]) || (src_[p] == '_' && p + 1 < src_.size() && is_digit(src_[p + 1])))) ++p;
    return p;
  }

  size_t number(size_t p) {
    size_t q = digits(p);
    // After '.', digits are an attribute or index (`x.0`), never a float, as in jinja2.
    const bool after_dot = !tokens_.empty() && tokens_.back().kind == Token::Kind::op && tokens_.back().text == ".";
    bool is_float = false;
    if (!after_dot) {
      if (q + 1 < src_.size() && src_[q] == '.' && is_digit(src_[q + 1])) {
        q = digits(q + 1);
        is_float = true;
      }
      if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
        size_t r = q + 1;
        if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
        if (r < src_.size() && is_digit(src_[r])) {
          q = digits(r);
          is_float = true;
        }
      }
    }
    std::string text;
    for (size_t k = p; k < q; ++k)
      if (src_[k] != '_') text += src_[k];
    push(is_float ? Token::Kind::floating : Token::Kind::integer, text, p);
    return q;
  }

  // Python string literal escapes (jinja2 decodes literals with "unicode-escape").
  size_t string(size_t p) {
    const char quote = src_[p];
    std::string value;
    size_t q = p + 1;
    while (true) {
      if (q >= src_.size()) error(p, "unterminated string literal");
      const char c = src_[q];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++q;
        continue;
      }
      if (q + 1 >= src_.size()) error(p, "unterminated string literal");
      const char e = src_[q + 1];
      q += 2;
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case '\n': break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (q + n > src_.size()) error(p, "truncated \\" + std::string(1, e) + " escape");
          unsigned cp = 0;
          for (size_t k = 0; k < n; ++k) {
            const char h = src_[q + k];
            const int d = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
            if (d < 0) error(p, "bad \\" + std::string(1, e) + " escape");
            cp = cp * 16 + static_cast<unsigned>(d);
          }
          if (cp > 0x10FFFF) error(p, "escape beyond U+10FFFF");
          append_utf8(value, cp);
          q += n;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            unsigned cp = static_cast<unsigned>(e - '0');
            for (int k = 0; k < 2 && q < src_.size() && src_[q] >= '0' && src_[q] <= '7'; ++k, ++q) cp = cp * 8 + static_cast<unsigned>(src_[q] - '0');
            append_utf8(value, cp);
          } else {
            value += '\\';  // Python keeps unknown escapes as written
            value += e;
          }
      }
    }
    push(Token::Kind::string, value, p);
    return q + 1;
  }

  std::string src_;
  const std::string& name_;
  std::vector<Token> tokens_;
  std::vector<size_t> line_starts_;  // offset of each line's first character
};

}  // namespace

std::vector<Token> lex_template(const std::string& source, const std::string& name) {
  return Lexer(source, name).run();
}

}  // namespace mm::jinja
