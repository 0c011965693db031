#include "server/access.h"

#include <openssl/evp.h>

#include <cctype>
#include <cstring>
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

namespace {

// One key per line; blank lines and # comments skipped; a byte-order mark
// dropped. `flag` names the file in errors.
Status ReadKeys(const std::string& path, const char* flag, std::vector<std::string>* keys) {
  std::ifstream in(path);
  if (!in) return NotFound(std::string("cannot read ") + flag + " '" + path + "'");
  std::string line;
  size_t from_file = 0;
  for (bool first = true; std::getline(in, line); first = false) {
    if (first && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // a UTF-8 byte-order mark
    const size_t b = line.find_first_not_of(" \t\r"), e = line.find_last_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    keys->push_back(line.substr(b, e - b + 1));
    ++from_file;
  }
  if (in.bad() || !in.eof()) return InvalidArgument(std::string("cannot read ") + flag + " '" + path + "' to its end");
  if (from_file == 0) return InvalidArgument(std::string(flag) + " '" + path + "' holds no key");
  return Status::Ok();
}

bool AnyKeyMatches(const std::vector<std::string>& keys, std::string_view given) {
  bool ok = false;
  for (const std::string& k : keys) ok = ConstantTimeEqual(given, k) || ok;  // every key compared, always
  return ok;
}

}  // namespace

StatusOr<AccessPolicy> AccessPolicy::Load(const std::string& key, const std::string& key_file,
                                          const std::string& cors_origin) {
  AccessPolicy p;
  p.cors_origin = cors_origin;
  if (!key.empty()) p.api_keys.push_back(key);
  if (!key_file.empty()) TANDEM_RETURN_IF_ERROR(ReadKeys(key_file, "--api-key-file", &p.api_keys));
  for (const std::string& k : p.api_keys) {
    if (k.size() < 8) return InvalidArgument("an API key must be at least 8 characters");
  }
  return p;
}

Status AccessPolicy::LoadAdminKeys(const std::string& path) {
  std::vector<std::string> keys;
  TANDEM_RETURN_IF_ERROR(ReadKeys(path, "--admin-key-file", &keys));
  for (const std::string& k : keys) {
    if (AnyKeyMatches(api_keys, k)) {
      return InvalidArgument("a key in --admin-key-file is also a client's API key: an operator's key must be its own");
    }
    if (k.size() < 16) return InvalidArgument("an admin key must be at least 16 characters");
  }
  admin_keys.insert(admin_keys.end(), keys.begin(), keys.end());
  return Status::Ok();
}

std::string_view BearerToken(std::string_view authorization) {
  constexpr std::string_view kBearer = "bearer ";  // the scheme is case-insensitive (RFC 9110)
  if (authorization.size() < kBearer.size()) return {};
  for (size_t i = 0; i < kBearer.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kBearer[i]) return {};
  }
  return authorization.substr(kBearer.size());
}

Access AccessPolicy::Check(std::string_view path, std::string_view authorization) const {
  const bool admin = path.substr(0, 7) == "/admin/";
  if (!admin && (api_keys.empty() || path.substr(0, 4) != "/v1/")) return Access::kAllowed;
  const std::string_view given = BearerToken(authorization);
  if (!admin) return !given.empty() && AnyKeyMatches(api_keys, given) ? Access::kAllowed : Access::kUnauthorized;
  // /admin/ routes change what a server does: an operator's key only.
  if (!given.empty() && AnyKeyMatches(admin_keys, given)) return Access::kAllowed;
  return !given.empty() && AnyKeyMatches(api_keys, given) ? Access::kForbidden : Access::kUnauthorized;
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

namespace {

uint64_t Salt(std::string_view kind, std::string_view value) {
  std::string text(kind);
  text.push_back('\0');
  text.append(value);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(text.data(), text.size(), digest, &length, EVP_sha256(), nullptr) != 1 || length < 8) {
    TANDEM_CHECK_MSG(false, "SHA-256 failed");
  }
  uint64_t salt = 0;
  std::memcpy(&salt, digest, sizeof salt);
  return salt == 0 ? 1 : salt;  // 0 is the shared namespace
}

}  // namespace

uint64_t CacheSaltFor(std::string_view authorization, const std::optional<std::string>& cache_salt) {
  if (cache_salt) return Salt("cache_salt", *cache_salt);
  // By the token whether or not this process checks keys: a router that
  // only passes the header on and the decode servers that check it (or the
  // other way round) derive the same tenant from the same request.
  const std::string_view key = BearerToken(authorization);
  return key.empty() ? 0 : Salt("api_key", key);
}

namespace {

std::string AccessErrorJson(int status, std::string message, std::string code) {
  ApiError e;
  e.http_status = status;
  e.message = std::move(message);
  e.code = std::move(code);
  return ErrorJson(e);
}

}  // namespace

std::string UnauthorizedJson() {
  return AccessErrorJson(401, "a valid API key is needed: send it as 'Authorization: Bearer <key>'", "invalid_api_key");
}

std::string ForbiddenAdminJson() {
  return AccessErrorJson(
      403, "this key may not use /admin/ routes: they take an operator's key (--admin-key-file), never a client's",
      "admin_key_required");
}

}  // namespace tandem
