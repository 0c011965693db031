// Tool calls in model output. The prompt (openai_chat.cc) asks for
// <tool_call>{"name": ..., "arguments": {...}}</tool_call>; this finds those
// blocks and turns each well-formed one into an OpenAI tool call. Anything
// that does not parse is left in the content, so no model text is lost.
#include <optional>

#include "server/openai_api.h"
#include "server/openai_json.h"

namespace tandem {
namespace {

using openai_internal::Json;

constexpr std::string_view kOpenTag = "<tool_call>";
constexpr std::string_view kCloseTag = "</tool_call>";

std::string_view Trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(kSpace) - begin + 1);
}

// The call a block's JSON describes, or nullopt if it is not one.
std::optional<ToolCall> ParseCallJson(std::string_view block) {
  // Model output can nest arbitrarily; dumping "arguments" back recurses.
  if (openai_internal::JsonNestingDepth(block, openai_internal::kMaxJsonDepth) >
      openai_internal::kMaxJsonDepth) {
    return std::nullopt;
  }
  const Json call = Json::parse(Trim(block), nullptr, /*allow_exceptions=*/false);
  if (call.is_discarded() || !call.is_object()) return std::nullopt;
  const auto name = call.find("name");
  const auto arguments = call.find("arguments");
  if (name == call.end() || !name->is_string() || name->get_ref<const std::string&>().empty() ||
      arguments == call.end()) {
    return std::nullopt;
  }
  ToolCall out;
  out.name = name->get<std::string>();
  if (arguments->is_object()) {
    out.arguments_json = openai_internal::Dump(*arguments);
  } else if (arguments->is_string()) {
    out.arguments_json =
        arguments->get<std::string>();  // already JSON text, by OpenAI's convention
  } else {
    return std::nullopt;
  }
  return out;
}

}  // namespace

ParsedOutput ParseToolCalls(std::string_view text, uint64_t request_id) {
  ParsedOutput out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t open = text.find(kOpenTag, pos);
    if (open == std::string_view::npos) break;
    const size_t body = open + kOpenTag.size();
    const size_t close = text.find(kCloseTag, body);
    // A last block may have lost its closing tag to a stop string or the
    // token limit; it still counts if its JSON is complete.
    const size_t body_end = close == std::string_view::npos ? text.size() : close;
    const size_t block_end =
        close == std::string_view::npos ? text.size() : close + kCloseTag.size();
    out.content.append(text.substr(pos, open - pos));
    std::optional<ToolCall> call = ParseCallJson(text.substr(body, body_end - body));
    if (call) {
      call->id = "call_" + std::to_string(request_id) + "_" + std::to_string(out.tool_calls.size());
      out.tool_calls.push_back(std::move(*call));
    } else {
      out.content.append(text.substr(open, block_end - open));
    }
    pos = block_end;
  }
  if (pos < text.size()) out.content.append(text.substr(pos));
  // Models put newlines around their calls; they are not an answer.
  if (!out.tool_calls.empty()) out.content = std::string(Trim(out.content));
  return out;
}

}  // namespace tandem
