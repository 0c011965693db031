// A Jinja subset for chat templates: enough of Jinja2 to render the
// `tokenizer.chat_template` that GGUF files carry (Llama 3.x, Qwen 2.5,
// Mistral, ChatML tool templates and their kin) the way Hugging Face renders
// them: Jinja2 with trim_blocks and lstrip_blocks, `tojson` as json.dumps
// (ensure_ascii off), `raise_exception`, and `strftime_now`.
//
// Supported: {{ }} output, {% if/elif/else %}, {% for a[, b] in x [if c] %}
// with `loop` and {% else %}, {% set x = ... %} and {% set ns.attr = ... %},
// {# #}, whitespace control (-), literals (strings, numbers, lists, dicts,
// true/false/none in either case), names, attributes, subscripts and slices,
// calls, filters, tests, and the operators of Jinja2 expressions. Anything
// else (macros, blocks, includes, unknown filters or tests) is refused with
// an error naming it and the line; nothing is silently ignored. Rendering is
// a pure function of the template, the context and the given functions.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::jinja {

using Json = nlohmann::ordered_json;

struct Node;

// A parsed template; reusable and safe to render from several threads.
class Template {
 public:
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // trim_blocks and lstrip_blocks on, as Hugging Face configures Jinja2.
  static StatusOr<Template> Parse(std::string_view source);

  // Functions callable from the template besides the built-ins (range,
  // namespace, dict, raise_exception): e.g. strftime_now. Each takes the
  // call's positional arguments.
  using Function = std::function<StatusOr<Json>(const std::vector<Json>& args)>;

  // Renders with `context`'s keys as variables (messages, tools, bos_token,
  // add_generation_prompt, ...). Errors name the line and what went wrong
  // (InvalidArgument); raise_exception's message is returned as the error's
  // message with code Aborted: the template refused its input. Work is
  // bounded (2^22 evaluation steps and loop iterations, 2^20 items per loop, 64 MiB of text,
  // values 64 deep); past a bound the render fails and says which.
  StatusOr<std::string> Render(const Json& context, const std::map<std::string, Function>& functions = {}) const;

 private:
  Template();
  std::vector<std::unique_ptr<Node>> nodes_;
};

// Python's json.dumps(value, ensure_ascii=False, indent=indent,
// separators=(item, key)) with sort_keys: Hugging Face's `tojson`.
// indent < 0: none (separators default to ", " and ": "; with an indent, ",").
std::string DumpJson(const Json& value, int indent = -1, bool sort_keys = false, const std::string* item_sep = nullptr,
                     const std::string* key_sep = nullptr);

}  // namespace tandem::jinja
