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
  ChatMessage(std::string role_, std::string content_) : role(std::move(role_)), content(std::move(content_)) {}

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

  // A Jinja template that lays out `tools` and asks for calls in the
  // <tool_call>{...}</tool_call> form tandem parses (Hermes, Qwen 2.5):
  // messages then carry their tool calls structured. For every other format
  // the caller renders tools and calls into the text in that form itself.
  bool native_tool_calls() const { return native_tool_calls_; }
  bool is_jinja() const { return jinja_ != nullptr; }
  ChatTemplateKind builtin_kind() const { return kind_; }
  // Empty when the model's own template is used.
  const std::string& fallback_reason() const { return fallback_reason_; }
  // For logs: "the model's Jinja template" or "built-in llama2 (...)".
  std::string Describe() const;

 private:
  std::shared_ptr<const jinja::Template> jinja_;  // null: the built-in kind_
  ChatTemplateKind kind_ = ChatTemplateKind::kPlain;
  bool native_tool_calls_ = false;
  bool override_ = false;
  std::string fallback_reason_;
};

}  // namespace tandem
