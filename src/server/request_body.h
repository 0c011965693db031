// The checks every front end applies to a request body before it reads a
// single field: valid UTF-8, nesting no deeper than any real request needs, a
// JSON object. `serve` parses whole requests (server/openai_api.h); the router
// reads only what it places and relays by, through these, so a body that
// `serve` would refuse with a 400 is refused by the router with the same 400
// instead of reaching a field read that throws.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "server/openai_api.h"

namespace tandem {

// The body as a JSON object, or the 400 that says what is wrong with it.
std::optional<ApiError> ParseRequestBody(std::string_view body, nlohmann::json* out);

// `stream`: a boolean; absent or null means false, as OpenAI treats it.
std::optional<ApiError> ReadStreamFlag(const nlohmann::json& body, bool* stream);

}  // namespace tandem
