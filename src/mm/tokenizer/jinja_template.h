// A Jinja interpreter of our own for Hugging Face chat templates: renders a model's
// chat_template.jinja as transformers' apply_chat_template does (jinja2's sandboxed environment
// with trim_blocks and lstrip_blocks, loop controls, the {% generation %} tag, raise_exception,
// strftime_now and transformers' tojson), byte for byte. It covers the subset published chat
// templates use; anything else is an mm::Error naming the template, line, column and construct,
// e.g. "Qwen3-VL-8B/chat_template.jinja:12:5: unsupported filter 'wordwrap'".
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace mm {

namespace jinja {
struct Stmt;
}

class JinjaTemplate {
 public:
  // Parses `source`; `name` (e.g. "Qwen3-VL-8B/chat_template.jinja") names the template in errors.
  JinjaTemplate(std::string source, std::string name);
  ~JinjaTemplate();
  // Copies share the parsed template, which nothing changes after parsing.
  JinjaTemplate(const JinjaTemplate&);
  JinjaTemplate& operator=(const JinjaTemplate&);
  JinjaTemplate(JinjaTemplate&&) noexcept;
  JinjaTemplate& operator=(JinjaTemplate&&) noexcept;

  // Renders with `context`, a JSON object of the template's variables: messages, tools,
  // add_generation_prompt, enable_thinking, bos_token, ... An ordered_json keeps the order of
  // keys, which tojson prints as given (as Python's dicts do); a plain json sorts them.
  // `__now__` (seconds since the Unix epoch, read as UTC) fixes the time strftime_now formats;
  // without it, strftime_now formats the local time now, as transformers does. Rendering keeps
  // its state per call, so one template may render on several threads at once.
  std::string render(const nlohmann::ordered_json& context) const;
  std::string render(const nlohmann::json& context) const;

  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::shared_ptr<const std::vector<std::unique_ptr<jinja::Stmt>>> body_;
};

}  // namespace mm
