#include "server/request_body.h"

#include "server/openai_json.h"

namespace tandem {

std::optional<ApiError> ParseRequestBody(std::string_view body, nlohmann::json* out) {
  return openai_internal::ParseBody(body, out);
}

std::optional<ApiError> ReadStreamFlag(const nlohmann::json& body, bool* stream) {
  *stream = false;
  return openai_internal::ReadOptionalBool(body, "stream", stream);
}

}  // namespace tandem
