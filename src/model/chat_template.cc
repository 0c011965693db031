#include "model/chat_template.h"

#include <ctime>

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

namespace {

// strftime_now(format): the current UTC time, as templates that print
// today's date (Llama 3.1's) expect.
StatusOr<jinja::Json> StrftimeNow(const std::vector<jinja::Json>& args) {
  if (args.size() != 1 || !args[0].is_string()) return InvalidArgument("strftime_now takes one format string");
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[256];
  const size_t n = std::strftime(buf, sizeof buf, args[0].get_ref<const std::string&>().c_str(), &tm);
  return jinja::Json(std::string(buf, n));
}

}  // namespace

ChatFormat ChatFormat::FromModel(std::string_view jinja_source) {
  ChatFormat f;
  f.kind_ = DetectChatTemplate(jinja_source);
  if (jinja_source.empty()) {
    f.fallback_reason_ = "the model has no chat template";
    return f;
  }
  auto parsed = jinja::Template::Parse(jinja_source);
  if (!parsed.ok()) {
    f.fallback_reason_ = "the model's template is outside the Jinja subset: " + parsed.status().message();
    return f;
  }
  f.jinja_ = std::make_shared<const jinja::Template>(std::move(*parsed));
  f.native_tool_calls_ = jinja_source.find("<tool_call>") != std::string_view::npos &&
                         jinja_source.find("tools") != std::string_view::npos;
  return f;
}

StatusOr<ChatFormat> ChatFormat::FromOverride(std::string_view jinja_source) {
  auto parsed = jinja::Template::Parse(jinja_source);
  if (!parsed.ok()) return InvalidArgument("the chat template " + parsed.status().message());
  ChatFormat f = FromModel(jinja_source);
  f.override_ = true;
  return f;
}

ChatFormat ChatFormat::Builtin(ChatTemplateKind kind) {
  ChatFormat f;
  f.kind_ = kind;
  f.fallback_reason_ = "chosen by name";
  return f;
}

StatusOr<std::string> ChatFormat::Render(std::span<const ChatMessage> messages, const jinja::Json& tools,
                                         bool add_generation_prompt, std::string_view bos_text,
                                         std::string_view eos_text) const {
  if (jinja_ == nullptr) return RenderChat(kind_, messages, add_generation_prompt, bos_text);
  TANDEM_RETURN_IF_ERROR(CheckRoles(messages));
  jinja::Json context = jinja::Json::object();
  jinja::Json& list = context["messages"] = jinja::Json::array();
  for (const ChatMessage& m : messages) {
    jinja::Json j = {{"role", m.role}, {"content", m.content}};
    if (!m.tool_calls.is_null()) j["tool_calls"] = m.tool_calls;
    if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
    list.push_back(std::move(j));
  }
  if (native_tool_calls_ && !tools.is_null()) context["tools"] = tools;
  context["bos_token"] = std::string(bos_text);
  context["eos_token"] = std::string(eos_text);
  context["add_generation_prompt"] = add_generation_prompt;
  static const std::map<std::string, jinja::Template::Function> kFunctions = {{"strftime_now", StrftimeNow}};
  return jinja_->Render(context, kFunctions);
}

std::string ChatFormat::Describe() const {
  if (jinja_ != nullptr) {
    return std::string(override_ ? "the --chat-template file" : "the model's own template") + " (Jinja" +
           (native_tool_calls_ ? ", tools laid out by the template)" : ")");
  }
  return std::string("built-in ") + ChatTemplateName(kind_) + " shape (" + fallback_reason_ + ")";
}

}  // namespace tandem
