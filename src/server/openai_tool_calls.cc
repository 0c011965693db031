// Tool calls in model output, in the format the prompt asked for: tandem's
// own tool text and Hermes/Qwen templates ask for <tool_call>{...}</tool_call>
// blocks, Llama 3 templates for a bare JSON answer, Mistral's for
// [TOOL_CALLS] [...]. Each well-formed call becomes an OpenAI tool call;
// anything that does not parse is left in the content, so no model text is
// lost.
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

// The call a JSON object describes, or nullopt if it is not one. The
// arguments are "arguments" (or, where the format allows, "parameters"): an
// object, or a string already holding JSON text (OpenAI's convention).
std::optional<ToolCall> CallFromJson(const Json& call, bool parameters_too) {
  if (!call.is_object()) return std::nullopt;
  const auto name = call.find("name");
  auto arguments = call.find("arguments");
  if (arguments == call.end() && parameters_too) arguments = call.find("parameters");
  if (name == call.end() || !name->is_string() || name->get_ref<const std::string&>().empty() ||
      arguments == call.end()) {
    return std::nullopt;
  }
  ToolCall out;
  out.name = name->get<std::string>();
  if (arguments->is_object()) {
    out.arguments_json = openai_internal::Dump(*arguments);
  } else if (arguments->is_string()) {
    out.arguments_json = arguments->get<std::string>();
  } else {
    return std::nullopt;
  }
  return out;
}

// JSON text, or discarded when it does not parse or nests too deeply (model
// output can nest arbitrarily; dumping "arguments" back recurses).
Json ParseBounded(std::string_view text) {
  if (openai_internal::JsonNestingDepth(text, openai_internal::kMaxJsonDepth) > openai_internal::kMaxJsonDepth) {
    return Json(Json::value_t::discarded);
  }
  return Json::parse(Trim(text), nullptr, /*allow_exceptions=*/false);
}

// One call object, or an array of them; nullopt unless every one is a call.
std::optional<std::vector<ToolCall>> CallsFromJson(const Json& j, bool parameters_too) {
  std::vector<ToolCall> calls;
  if (j.is_array()) {
    for (const Json& item : j) {
      auto call = CallFromJson(item, parameters_too);
      if (!call) return std::nullopt;
      calls.push_back(std::move(*call));
    }
  } else if (auto call = CallFromJson(j, parameters_too)) {
    calls.push_back(std::move(*call));
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

// Mistral's templates insist on call ids of exactly nine letters and digits;
// these are a pure function of the request and the call's index.
std::string NineCharacterId(uint64_t request_id, size_t index) {
  constexpr std::string_view kAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  uint64_t x = request_id * 0x9E3779B97F4A7C15ull + index + 1;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  std::string id(9, 'a');
  for (char& c : id) {
    c = kAlphabet[x % kAlphabet.size()];
    x /= kAlphabet.size();
  }
  return id;
}

ParsedOutput ParseTagged(std::string_view text, uint64_t request_id) {
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
    std::optional<ToolCall> call = CallFromJson(ParseBounded(text.substr(body, body_end - body)), false);
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

}  // namespace

ParsedOutput ParseToolCalls(std::string_view text, uint64_t request_id, ToolCallFormat format) {
  if (format == ToolCallFormat::kTagged) return ParseTagged(text, request_id);
  ParsedOutput out;
  std::string_view before, body;
  if (format == ToolCallFormat::kJson) {
    constexpr std::string_view kPythonTag = "<|python_tag|>";
    body = Trim(text);
    if (body.starts_with(kPythonTag)) body = body.substr(kPythonTag.size());
  } else {  // kMistral
    constexpr std::string_view kMarker = "[TOOL_CALLS]";
    const size_t at = text.find(kMarker);
    if (at == std::string_view::npos) return ParsedOutput{std::string(text), {}};
    before = Trim(text.substr(0, at));
    body = text.substr(at + kMarker.size());
  }
  auto calls = CallsFromJson(ParseBounded(body), /*parameters_too=*/format == ToolCallFormat::kJson);
  if (!calls) return ParsedOutput{std::string(text), {}};
  out.content = std::string(before);
  out.tool_calls = std::move(*calls);
  for (size_t i = 0; i < out.tool_calls.size(); ++i) {
    out.tool_calls[i].id = format == ToolCallFormat::kMistral
                               ? NineCharacterId(request_id, i)
                               : "call_" + std::to_string(request_id) + "_" + std::to_string(i);
  }
  return out;
}

}  // namespace tandem
