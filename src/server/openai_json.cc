#include "server/openai_json.h"

#include <cmath>
#include <limits>

#include "model/unicode.h"

namespace tandem::openai_internal {

ApiError BadRequest(std::string param, std::string message, std::string code) {
  ApiError e;
  e.http_status = 400;
  e.type = "invalid_request_error";
  e.param = std::move(param);
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

std::optional<size_t> FindInvalidUtf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (uint8_t(text[pos]) < 0x80) {  // fast path: ASCII
      ++pos;
      continue;
    }
    const unicode::DecodedChar c = unicode::DecodeAt(text, pos);
    if (!c.valid) return pos;
    pos += size_t(c.length);
  }
  return std::nullopt;
}

int JsonNestingDepth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char ch : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (ch == '\\') {
        escaped = true;
      } else if (ch == '"') {
        in_string = false;
      }
      continue;
    }
    if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  return deepest;
}

MaybeError ParseBody(std::string_view body, Json* out) {
  // Checked on the raw bytes first so the client learns where the bad byte
  // is, rather than a parser message about an "ill-formed UTF-8 byte".
  if (const auto bad = FindInvalidUtf8(body)) {
    return BadRequest(
        "", "request body is not valid UTF-8 (bad byte at offset " + std::to_string(*bad) + ")");
  }
  if (JsonNestingDepth(body, kMaxJsonDepth) > kMaxJsonDepth) {
    return BadRequest(
        "", "request body nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  Json parsed;
  try {
    parsed = Json::parse(body);
  } catch (const Json::exception& e) {
    return BadRequest("", std::string("request body is not valid JSON: ") + e.what());
  }
  if (!parsed.is_object()) return BadRequest("", "request body must be a JSON object");
  *out = std::move(parsed);
  return std::nullopt;
}

const Json* Field(const Json& object, std::string_view key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

MaybeError ReadString(const Json& value, const std::string& name, std::string* out) {
  if (!value.is_string()) return BadRequest(name, "'" + name + "' must be a string");
  const std::string& s = value.get_ref<const std::string&>();
  // The raw body was valid UTF-8 and the parser checks \u escapes, so this
  // only fires for JSON built some other way; it keeps the promise local.
  if (FindInvalidUtf8(s)) return BadRequest(name, "'" + name + "' is not valid UTF-8");
  *out = s;
  return std::nullopt;
}

MaybeError ReadOptionalInt(const Json& object, const char* key, std::optional<int64_t>* out) {
  const Json* v = Field(object, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) {
    return BadRequest(key, std::string("'") + key + "' must be an integer");
  }
  if (v->is_number_unsigned()) {
    // Saturate: a huge value is out of every range we check.
    const uint64_t u = v->get<uint64_t>();
    *out = u > uint64_t(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                             : int64_t(u);
  } else {
    *out = v->get<int64_t>();
  }
  return std::nullopt;
}

MaybeError ReadOptionalNumber(const Json& object, const char* key, std::optional<double>* out) {
  const Json* v = Field(object, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return BadRequest(key, std::string("'") + key + "' must be a number");
  const double d = v->get<double>();
  if (!std::isfinite(d)) return BadRequest(key, std::string("'") + key + "' must be finite");
  *out = d;
  return std::nullopt;
}

MaybeError ReadOptionalBool(const Json& object, const char* key, bool* out) {
  const Json* v = Field(object, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) return BadRequest(key, std::string("'") + key + "' must be a boolean");
  *out = v->get<bool>();
  return std::nullopt;
}

std::string Dump(const Json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

std::string Dump(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

std::string Quote(const std::string& text) { return Dump(Json(text)); }

}  // namespace tandem::openai_internal
