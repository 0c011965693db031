// Who may use the API, and which web pages may call it: API keys and CORS
// for the HTTP front ends (`serve`, `router`). Pure functions and plain data,
// so both servers apply the same rules and tests need no sockets.
//
// Keys guard the API routes (/v1/...); /health and /metrics stay open for
// probes and scrapers. Admin routes (/admin/...) take only an operator's key
// (--admin-key-file), never a client's (invariant 10): a client key there is
// refused with 403, and without admin keys they are closed to everyone. A
// key is both a client's and an operator's only if it is in both files: the
// load refuses that. A key is compared in constant time over the longest
// length, so a wrong guess's timing says nothing about how close it came.
// CORS headers are sent only when an origin is configured: without one, a web
// page on another origin cannot read the answers.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tandem {

bool ConstantTimeEqual(std::string_view a, std::string_view b);

// What a request's credentials allow on a route.
enum class Access {
  kAllowed,
  kUnauthorized,  // no valid key for this route: 401
  kForbidden,     // a valid client key on an operator's route: 403
};

struct AccessPolicy {
  std::vector<std::string> api_keys;    // empty: no key needed on /v1/
  std::vector<std::string> admin_keys;  // empty: /admin/ closed
  std::string cors_origin;              // empty: no CORS headers; "*" any origin

  // --api-key KEY and/or --api-key-file PATH (one key per line; blank lines
  // and lines starting with # skipped), --cors-origin ORIGIN.
  static StatusOr<AccessPolicy> Load(const std::string& key, const std::string& key_file,
                                     const std::string& cors_origin);
  // --admin-key-file PATH (the same format): the operators' keys. A key that
  // is also a client's is refused.
  Status LoadAdminKeys(const std::string& path);

  // What a request to `path` with this Authorization header may do.
  Access Check(std::string_view path, std::string_view authorization) const;
  bool Authorized(std::string_view path, std::string_view authorization) const {
    return Check(path, authorization) == Access::kAllowed;
  }
  // The CORS response headers for a request from `origin` (none when no
  // origin is configured or it is another one). preflight: an OPTIONS request.
  std::map<std::string, std::string> CorsHeaders(std::string_view origin, bool preflight) const;
};

// The tenant a request's prefix-cache pages belong to (invariant 10;
// RequestSpec::cache_salt, common/chain_key.h): its `cache_salt` when it sent
// one (requests that send the same one share, whatever their keys: a
// cache_salt is a secret its sharers hold, like a key); else its bearer
// token's (each key its own, whether or not this process checks keys, so a
// router and its decode servers always agree); else 0 (requests without a
// token share one namespace). A one-way hash (SHA-256): a salt names a
// tenant without telling its key.
uint64_t CacheSaltFor(std::string_view authorization, const std::optional<std::string>& cache_salt);

// The 401 body, in OpenAI's error shape.
std::string UnauthorizedJson();
// The 403 body for a client key on an operator's route.
std::string ForbiddenAdminJson();
// The bearer token of an Authorization header ("" when it has none).
std::string_view BearerToken(std::string_view authorization);

}  // namespace tandem
