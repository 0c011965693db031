// Chat prompt rendering for the common template families. A GGUF carries its
// template as Jinja source (tokenizer.chat_template); rather than run Jinja we
// recognise the family and render it the way that family's official template
// does.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tandem {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool"
  std::string content;
};

enum class ChatTemplateKind { kLlama2, kChatml, kLlama3, kPlain };

// From the Jinja source: "<|im_start|>" -> chatml, "<|start_header_id|>" ->
// llama-3, "[INST]" -> llama-2, anything else (or empty) -> plain.
ChatTemplateKind DetectChatTemplate(std::string_view jinja_source);

// "llama2", "chatml", "llama3", "plain".
const char* ChatTemplateName(ChatTemplateKind kind);
std::optional<ChatTemplateKind> ParseChatTemplateName(std::string_view name);

// Whether RenderChat writes the BOS text itself (llama-2 before every user
// turn, llama-3 once at the start). For these kinds the caller encodes the
// rendered text with parse_special and without adding another BOS; for the
// others it adds BOS as the tokenizer says.
bool ChatTemplateIncludesBos(ChatTemplateKind kind);

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

}  // namespace tandem
