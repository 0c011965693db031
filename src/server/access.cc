#include "server/access.h"

#include <cctype>
#include <fstream>

#include "server/openai_api.h"

namespace tandem {

bool ConstantTimeEqual(std::string_view a, std::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

StatusOr<AccessPolicy> AccessPolicy::Load(const std::string& key, const std::string& key_file,
                                          const std::string& cors_origin) {
  AccessPolicy p;
  p.cors_origin = cors_origin;
  if (!key.empty()) p.api_keys.push_back(key);
  if (!key_file.empty()) {
    std::ifstream in(key_file);
    if (!in) return NotFound("cannot read --api-key-file '" + key_file + "'");
    std::string line;
    size_t from_file = 0;
    for (bool first = true; std::getline(in, line); first = false) {
      if (first && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // a UTF-8 byte-order mark
      const size_t b = line.find_first_not_of(" \t\r"), e = line.find_last_not_of(" \t\r");
      if (b == std::string::npos || line[b] == '#') continue;
      p.api_keys.push_back(line.substr(b, e - b + 1));
      ++from_file;
    }
    if (in.bad() || !in.eof()) return InvalidArgument("cannot read --api-key-file '" + key_file + "' to its end");
    if (from_file == 0) return InvalidArgument("--api-key-file '" + key_file + "' holds no key");
  }
  for (const std::string& k : p.api_keys) {
    if (k.size() < 8) return InvalidArgument("an API key must be at least 8 characters");
  }
  return p;
}

bool AccessPolicy::Authorized(std::string_view path, std::string_view authorization) const {
  // /admin/ routes change what a server does: they need a key, and are
  // closed to everyone on a server without keys.
  const bool admin = path.substr(0, 7) == "/admin/";
  if (admin && api_keys.empty()) return false;
  if (api_keys.empty() || (path.substr(0, 4) != "/v1/" && !admin)) return true;
  constexpr std::string_view kBearer = "bearer ";  // the scheme is case-insensitive (RFC 9110)
  if (authorization.size() < kBearer.size()) return false;
  for (size_t i = 0; i < kBearer.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kBearer[i]) return false;
  }
  const std::string_view given = authorization.substr(kBearer.size());
  bool ok = false;
  for (const std::string& k : api_keys) ok = ConstantTimeEqual(given, k) || ok;  // every key compared, always
  return ok;
}

std::map<std::string, std::string> AccessPolicy::CorsHeaders(std::string_view origin, bool preflight) const {
  std::map<std::string, std::string> h;
  if (cors_origin.empty() || origin.empty() || (cors_origin != "*" && origin != cors_origin)) return h;
  h["Access-Control-Allow-Origin"] = cors_origin == "*" ? "*" : std::string(origin);
  if (cors_origin != "*") h["Vary"] = "Origin";
  if (preflight) {
    h["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS";
    h["Access-Control-Allow-Headers"] = "Authorization, Content-Type";
    h["Access-Control-Max-Age"] = "600";
  }
  return h;
}

std::string UnauthorizedJson() {
  ApiError e;
  e.http_status = 401;
  e.message = "a valid API key is needed: send it as 'Authorization: Bearer <key>'";
  e.code = "invalid_api_key";
  return ErrorJson(e);
}

}  // namespace tandem
