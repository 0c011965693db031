// Chat prompt rendering. A GGUF carries its template as Jinja source
// (tokenizer.chat_template); ChatFormat runs it with the Jinja subset
// (model/jinja.h) as Hugging Face runs it, and falls back to the built-in
// shape of the template's family — rendered the way that family's official
// template does — when the model has no template or the subset refuses it.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "common/status.h"
#include "model/jinja.h"

namespace tandem {

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string r, std::string c) : role(std::move(r)), content(std::move(c)) {}

  std::string role;  // "system", "user", "assistant" or "tool"
  std::string content;
  // Only for templates that lay out tool calls themselves (ChatFormat::
  // native_tool_calls): an assistant turn's calls, [{"id", "type": "function",
  // "function": {"name", "arguments": {...}}}] with the arguments parsed, and
  // a tool turn's tool_call_id. Null / empty otherwise.
  jinja::Json tool_calls;
  std::string tool_call_id;
};

enum class ChatTemplateKind { kLlama2, kChatml, kLlama3, kPlain };

// From the Jinja source: "<|im_start|>" -> chatml, "<|start_header_id|>" ->
// llama-3, "[INST]" -> llama-2, anything else (or empty) -> plain.
ChatTemplateKind DetectChatTemplate(std::string_view jinja_source);

// "llama2", "chatml", "llama3", "plain".
const char* ChatTemplateName(ChatTemplateKind kind);
std::optional<ChatTemplateKind> ParseChatTemplateName(std::string_view name);

// Renders the conversation, ending with the assistant's turn header when
// add_generation_prompt. bos_text is the BOS token's spelling ("<s>",
// "<|begin_of_text|>"). Formats:
//   llama2: "<s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s>"
//           contents trimmed; system text joins the next user turn; tool results
//           are rendered as user turns; the generation prompt is implicit.
//   chatml: "<|im_start|>{role}\n{content}<|im_end|>\n" ... "<|im_start|>assistant\n"
//   llama3: "{bos}<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>" ...
//           contents trimmed; the tool role is spelled "ipython" as in Llama 3.1.
//   plain:  "System: {content}\nUser: {content}\nAssistant: {content}\n" ... "Assistant: "
// A role other than the four above -> InvalidArgument.
StatusOr<std::string> RenderChat(ChatTemplateKind kind, std::span<const ChatMessage> messages,
                                 bool add_generation_prompt, std::string_view bos_text);

// How a model writes tool calls, and so how tandem asks for and parses them.
enum class ToolCallFormat {
  kTagged,   // <tool_call>{"name": ..., "arguments": {...}}</tool_call> blocks (Hermes, Qwen 2.5, and
             // tandem's own tool text for every other template)
  kJson,     // the whole answer one {"name": ..., "parameters": {...}} object, or an array of them,
             // after an optional <|python_tag|> (Llama 3.x)
  kMistral,  // [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...], call ids of 9 letters and digits
};

// How a model's conversations become prompt text. Immutable; shared by the
// server and the reference verifier, which must render alike.
class ChatFormat {
 public:
  // The model's template: run as Jinja when the subset parses it, otherwise
  // the built-in shape DetectChatTemplate picks (fallback_reason() says why).
  // Empty source: the plain built-in shape.
  static ChatFormat FromModel(std::string_view jinja_source);
  // A template given by the user (--chat-template): it must parse.
  static StatusOr<ChatFormat> FromOverride(std::string_view jinja_source);
  static ChatFormat Builtin(ChatTemplateKind kind);

  // The prompt text, ending with the assistant's turn header when
  // add_generation_prompt. `tools` ([{"type": "function", "function": {...}}]
  // or null) reaches only a template with native_tool_calls(). Errors: an
  // unknown role, or the template's own raise_exception message.
  StatusOr<std::string> Render(std::span<const ChatMessage> messages, const jinja::Json& tools,
                               bool add_generation_prompt, std::string_view bos_text,
                               std::string_view eos_text) const;

  // Whether the tokenizer's BOS must be added before `rendered`: templates
  // that spell BOS themselves get no second one.
  static bool NeedsBos(std::string_view rendered, bool tokenizer_adds_bos, std::string_view bos_text) {
    return tokenizer_adds_bos && !rendered.starts_with(bos_text);
  }

  // A Jinja template that lays out `tools` itself and asks for calls in one
  // of the ToolCallFormats tandem parses (recognised by its markers:
  // "[TOOL_CALLS]", "<tool_call>", or Llama 3 headers with "parameters"):
  // messages then carry their tool calls structured. For every other format
  // the caller renders tools and calls into the text as <tool_call> blocks.
  bool native_tool_calls() const { return native_tool_format_.has_value(); }
  // The format answers are parsed in: the template's own, or kTagged.
  ToolCallFormat tool_call_format() const { return native_tool_format_.value_or(ToolCallFormat::kTagged); }
  bool is_jinja() const { return jinja_ != nullptr; }
  ChatTemplateKind builtin_kind() const { return kind_; }
  // Empty when the model's own template is used.
  const std::string& fallback_reason() const { return fallback_reason_; }
  // For logs: "the model's Jinja template" or "built-in llama2 (...)".
  std::string Describe() const;
  // What decides the rendered text, as a short string two processes compare
  // (the server reports it; the reference refuses to judge under another):
  // "jinja:<XXH3-64 of the source>@<day>" or "builtin:<kind>".
  std::string Identity() const;

  // The day strftime_now() formats (templates that print today's date, such
  // as Llama 3.1's). A fixed day, not the clock, so a prompt renders the same
  // whenever the reference replays it; set it with --chat-date.
  static constexpr int64_t kDefaultDate = 1721952000;  // 2024-07-26 00:00 UTC, Llama 3.1's own default
  void set_date(int64_t unix_seconds) { date_ = unix_seconds; }
  int64_t date() const { return date_; }

 private:
  std::shared_ptr<const jinja::Template> jinja_;  // null: the built-in kind_
  uint64_t source_hash_ = 0;                      // of the Jinja source
  ChatTemplateKind kind_ = ChatTemplateKind::kPlain;
  std::optional<ToolCallFormat> native_tool_format_;
  bool override_ = false;
  std::string fallback_reason_;
  int64_t date_ = kDefaultDate;
};

}  // namespace tandem
