// Private helpers shared by the openai_*.cc files: reading typed fields out
// of untrusted JSON without letting nlohmann's exceptions escape, and the
// error values those reads produce. Not part of the server's interface.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/openai_api.h"

namespace tandem::openai_internal {

using Json = nlohmann::json;

// No error, or the error to send back. Helpers return this so the parse
// functions can stop at the first problem and report the field it was in.
using MaybeError = std::optional<ApiError>;

#define TANDEM_RETURN_IF_API_ERROR(expr)              \
  do {                                                \
    if (auto _api_error = (expr)) return *_api_error; \
  } while (0)

// A 400 invalid_request_error about `param`.
ApiError BadRequest(std::string param, std::string message, std::string code = "");

// Requests nest only as deep as tool schemas do; a deeper body is rejected
// before parsing because dumping it back would recurse that deep.
constexpr int kMaxJsonDepth = 128;

// Byte offset of the first byte that does not start a valid, complete UTF-8
// sequence (overlong forms and surrogates are invalid), or nullopt.
std::optional<size_t> FindInvalidUtf8(std::string_view text);
// Deepest [ / { nesting outside strings; stops counting past `limit`.
int JsonNestingDepth(std::string_view text, int limit);

// Validates the raw bytes (UTF-8, nesting) and parses a JSON object.
MaybeError ParseBody(std::string_view body, Json* out);

// The member `key` of an object, or null when absent or JSON null: OpenAI
// clients commonly send null for "use the default".
const Json* Field(const Json& object, std::string_view key);

// Typed reads. `name` is how the field is called in error messages ("stop",
// "messages[2].content"). Out-parameters are written only on success.
MaybeError ReadString(const Json& value, const std::string& name, std::string* out);
MaybeError ReadOptionalInt(const Json& object, const char* key, std::optional<int64_t>* out);
MaybeError ReadOptionalNumber(const Json& object, const char* key, std::optional<double>* out);
MaybeError ReadOptionalBool(const Json& object, const char* key, bool* out);

// Serializes output JSON. Text from the model is valid UTF-8 by construction,
// but a stray byte must never turn into an exception, so it becomes U+FFFD.
std::string Dump(const Json& value);
std::string Dump(const nlohmann::ordered_json& value);  // responses keep OpenAI's field order
// A JSON string literal, quotes and escapes included.
std::string Quote(const std::string& text);

// Implemented in openai_chat.cc: "messages" (+ "tools", "tool_choice") ->
// the templated prompt's token ids, whether tool calls are expected, and the
// format they will come in.
// forced_constraint: with tool_choice "required" or a named function, the
// output constraint (structured/json_schema.h) that makes the answer such calls.
// ordered: the body with its key order kept (null when it has no tools).
MaybeError BuildChatPrompt(const Json& body, const nlohmann::ordered_json& ordered, const ModelInfo& model,
                           std::vector<int32_t>* tokens, bool* tools_enabled, ToolCallFormat* tool_format,
                           std::string* forced_constraint);

// Refuses, before tokenizing, a prompt text too long for the context
// whatever it encodes to (tokenizing costs memory per byte).
MaybeError CheckPromptBytes(size_t bytes, const ModelInfo& model, const char* param);

// Implemented in openai_format.cc.
MaybeError ReadResponseFormat(const nlohmann::ordered_json& ordered, const Json& body, std::string* constraint);
MaybeError ReadLogitControls(const Json& body, const ModelInfo& model, SamplingParams* p);
// Compiles spec's constraint (400 on `param` if it cannot be), checks that its
// shortest answer fits max_tokens, and sets the answer budget.
MaybeError CheckConstraint(const char* param, RequestSpec* spec);

}  // namespace tandem::openai_internal
