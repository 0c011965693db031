#include "model/chat_template.h"

#include <ctime>

#include <xxhash.h>

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

// strftime_now(format): the chat format's day, as templates that print
// today's date (Llama 3.1's) expect.
StatusOr<jinja::Json> StrftimeAt(int64_t unix_seconds, const std::vector<jinja::Json>& args) {
  if (args.size() != 1 || !args[0].is_string()) return InvalidArgument("strftime_now takes one format string");
  const std::time_t t = std::time_t(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[256];
  const size_t n = std::strftime(buf, sizeof buf, args[0].get_ref<const std::string&>().c_str(), &tm);
  return jinja::Json(std::string(buf, n));
}

}  // namespace

// The template tandem's generated models carried before they carried the
// Llama-2 shape of presets.h: it meant that shape, and was rendered as it.
constexpr std::string_view kFirstPresetTemplate =
    "{% for m in messages %}{% if m['role'] == 'user' %}{{ bos_token + '[INST] ' + "
    "m['content'] + ' [/INST]' }}{% else %}{{ ' ' + m['content'] + eos_token }}"
    "{% endif %}{% endfor %}";

ChatFormat ChatFormat::FromModel(std::string_view jinja_source) {
  ChatFormat f;
  f.kind_ = DetectChatTemplate(jinja_source);
  if (jinja_source.empty()) {
    f.fallback_reason_ = "the model has no chat template";
    return f;
  }
  if (jinja_source == kFirstPresetTemplate) {
    f.fallback_reason_ = "the first template of tandem's generated models, which always meant this shape";
    return f;
  }
  auto parsed = jinja::Template::Parse(jinja_source);
  if (!parsed.ok()) {
    f.fallback_reason_ = "the model's template is outside the Jinja subset: " + parsed.status().message();
    return f;
  }
  f.jinja_ = std::make_shared<const jinja::Template>(std::move(*parsed));
  f.source_hash_ = XXH3_64bits(jinja_source.data(), jinja_source.size());
  // Names (filters, methods, functions) are only looked up as they are used:
  // a plain conversation shows whether the subset runs this template at all.
  // A template that raises on it (its own rule, e.g. no system turn) is kept.
  const std::vector<ChatMessage> probe = {{"system", "s"}, {"user", "u"}, {"assistant", "a"}, {"user", "u"}};
  const Status tried = f.Render(probe, nullptr, true, "<s>", "</s>").status();
  if (!tried.ok() && tried.code() != StatusCode::kInvalidArgument) {
    f.jinja_ = nullptr;
    f.fallback_reason_ = "the model's template failed on a plain conversation: " + tried.message();
    return f;
  }
  auto has = [&](std::string_view marker) { return jinja_source.find(marker) != std::string_view::npos; };
  if (has("tools")) {
    if (has("[TOOL_CALLS]")) {
      f.native_tool_format_ = ToolCallFormat::kMistral;
    } else if (has("<tool_call>")) {
      f.native_tool_format_ = ToolCallFormat::kTagged;
    } else if (has("<|start_header_id|>") && has("parameters")) {
      f.native_tool_format_ = ToolCallFormat::kJson;
    }
  }
  return f;
}

StatusOr<ChatFormat> ChatFormat::FromOverride(std::string_view jinja_source) {
  if (jinja_source.empty()) return InvalidArgument("the chat template is empty");
  ChatFormat f = FromModel(jinja_source);
  if (f.jinja_ == nullptr) return InvalidArgument(f.fallback_reason_);
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
  if (native_tool_calls() && !tools.is_null()) context["tools"] = tools;
  context["bos_token"] = std::string(bos_text);
  context["eos_token"] = std::string(eos_text);
  context["add_generation_prompt"] = add_generation_prompt;
  const std::map<std::string, jinja::Template::Function> functions = {
      {"strftime_now", [date = date_](const std::vector<jinja::Json>& args) { return StrftimeAt(date, args); }}};
  auto text = jinja_->Render(context, functions);
  if (text.ok()) return text;
  // raise_exception: the template refuses these messages (the caller's
  // error); anything else is the template failing (the server's).
  if (text.status().code() == StatusCode::kAborted) return InvalidArgument(text.status().message());
  // Past a render bound: these messages ask for more than a render may cost
  // (invariant 10). The request's doing (OutOfRange: answered 400, never
  // moved), except on the plain conversation FromModel tries, where it is
  // the template's.
  if (text.status().code() == StatusCode::kResourceExhausted) {
    return OutOfRange("the messages are too large for the chat template: " + text.status().message());
  }
  return Internal("the chat template failed: " + text.status().message());
}

std::string ChatFormat::Identity() const {
  if (jinja_ == nullptr) return std::string("builtin:") + ChatTemplateName(kind_);
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(source_hash_));
  const std::time_t t = std::time_t(date_);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char day[16];
  std::strftime(day, sizeof day, "%Y-%m-%d", &tm);
  return std::string("jinja:") + hash + "@" + day;
}

std::string ChatFormat::Describe() const {
  if (jinja_ != nullptr) {
    static constexpr const char* kFormats[] = {"<tool_call> blocks", "Llama 3 JSON", "Mistral [TOOL_CALLS]"};
    return std::string(override_ ? "the --chat-template file" : "the model's own template") + " (Jinja" +
           (native_tool_calls() ? std::string(", tools laid out by the template, calls parsed as ") +
                                      kFormats[int(tool_call_format())] + ")"
                                : std::string(")"));
  }
  return std::string("built-in ") + ChatTemplateName(kind_) + " shape (" + fallback_reason_ + ")";
}

}  // namespace tandem
