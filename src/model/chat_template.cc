#include "model/chat_template.h"

namespace tandem {
namespace {

std::string_view Trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(kSpace) - begin + 1);
}

Status CheckRoles(std::span<const ChatMessage> messages) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return InvalidArgument("chat message " + std::to_string(i) + " has role '" + role +
                             "'; expected system, user, assistant or tool");
    }
  }
  return Status::Ok();
}

// Llama-2 has no system turn: the system text is wrapped in <<SYS>> and joins
// the next user turn, and every user turn opens with BOS.
std::string RenderLlama2(std::span<const ChatMessage> messages, std::string_view bos) {
  constexpr std::string_view kEos = "</s>";  // every llama-2 vocab spells EOS this way
  std::string out, pending_system;
  auto user_turn = [&](std::string_view content) {
    out.append(bos).append("[INST] ");
    if (!pending_system.empty()) {
      out.append("<<SYS>>\n").append(pending_system).append("\n<</SYS>>\n\n");
      pending_system.clear();
    }
    out.append(content).append(" [/INST]");
  };
  for (const ChatMessage& m : messages) {
    const std::string_view content = Trim(m.content);
    if (m.role == "system") {
      if (!pending_system.empty()) pending_system += "\n";
      pending_system.append(content);
    } else if (m.role == "assistant") {
      out.append(" ").append(content).append(" ").append(kEos);
    } else {
      user_turn(content);
    }
  }
  if (!pending_system.empty()) user_turn("");
  return out;
}

std::string RenderChatml(std::span<const ChatMessage> messages, bool add_generation_prompt) {
  std::string out;
  for (const ChatMessage& m : messages) {
    out.append("<|im_start|>").append(m.role).append("\n").append(m.content);
    out.append("<|im_end|>\n");
  }
  if (add_generation_prompt) out.append("<|im_start|>assistant\n");
  return out;
}

std::string RenderLlama3(std::span<const ChatMessage> messages, bool add_generation_prompt,
                         std::string_view bos) {
  std::string out(bos);
  for (const ChatMessage& m : messages) {
    const std::string_view role = m.role == "tool" ? "ipython" : std::string_view(m.role);
    out.append("<|start_header_id|>").append(role).append("<|end_header_id|>\n\n");
    out.append(Trim(m.content)).append("<|eot_id|>");
  }
  if (add_generation_prompt) out.append("<|start_header_id|>assistant<|end_header_id|>\n\n");
  return out;
}

std::string RenderPlain(std::span<const ChatMessage> messages, bool add_generation_prompt) {
  std::string out;
  for (const ChatMessage& m : messages) {
    const std::string_view label = m.role == "system" ? "System"
                                   : m.role == "user" ? "User"
                                   : m.role == "tool" ? "Tool"
                                                      : "Assistant";
    out.append(label).append(": ").append(m.content).append("\n");
  }
  if (add_generation_prompt) out.append("Assistant: ");
  return out;
}

}  // namespace

ChatTemplateKind DetectChatTemplate(std::string_view jinja_source) {
  if (jinja_source.find("<|im_start|>") != std::string_view::npos) return ChatTemplateKind::kChatml;
  if (jinja_source.find("<|start_header_id|>") != std::string_view::npos) {
    return ChatTemplateKind::kLlama3;
  }
  if (jinja_source.find("[INST]") != std::string_view::npos) return ChatTemplateKind::kLlama2;
  return ChatTemplateKind::kPlain;
}

const char* ChatTemplateName(ChatTemplateKind kind) {
  switch (kind) {
    case ChatTemplateKind::kLlama2:
      return "llama2";
    case ChatTemplateKind::kChatml:
      return "chatml";
    case ChatTemplateKind::kLlama3:
      return "llama3";
    case ChatTemplateKind::kPlain:
      return "plain";
  }
  return "plain";
}

std::optional<ChatTemplateKind> ParseChatTemplateName(std::string_view name) {
  for (ChatTemplateKind kind : {ChatTemplateKind::kLlama2, ChatTemplateKind::kChatml,
                                ChatTemplateKind::kLlama3, ChatTemplateKind::kPlain}) {
    if (name == ChatTemplateName(kind)) return kind;
  }
  return std::nullopt;
}

bool ChatTemplateIncludesBos(ChatTemplateKind kind) {
  return kind == ChatTemplateKind::kLlama2 || kind == ChatTemplateKind::kLlama3;
}

StatusOr<std::string> RenderChat(ChatTemplateKind kind, std::span<const ChatMessage> messages,
                                 bool add_generation_prompt, std::string_view bos_text) {
  TANDEM_RETURN_IF_ERROR(CheckRoles(messages));
  switch (kind) {
    case ChatTemplateKind::kLlama2:
      return RenderLlama2(messages, bos_text);
    case ChatTemplateKind::kChatml:
      return RenderChatml(messages, add_generation_prompt);
    case ChatTemplateKind::kLlama3:
      return RenderLlama3(messages, add_generation_prompt, bos_text);
    case ChatTemplateKind::kPlain:
      return RenderPlain(messages, add_generation_prompt);
  }
  return InvalidArgument("unknown chat template kind");
}

}  // namespace tandem
