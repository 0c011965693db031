// Who may use the API, and which web pages may call it: API keys and CORS
// for the HTTP front ends (`serve`, `router`). Pure functions and plain data,
// so both servers apply the same rules and tests need no sockets.
//
// Keys guard the API routes (/v1/...); /health and /metrics stay open for
// probes and scrapers. Admin routes (/admin/...) need a key, and are closed
// on a server without keys. A key is compared in constant time over the longest
// length, so a wrong guess's timing says nothing about how close it came.
// CORS headers are sent only when an origin is configured: without one, a web
// page on another origin cannot read the answers.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tandem {

bool ConstantTimeEqual(std::string_view a, std::string_view b);

struct AccessPolicy {
  std::vector<std::string> api_keys;  // empty: no key needed
  std::string cors_origin;            // empty: no CORS headers; "*" any origin

  // --api-key KEY and/or --api-key-file PATH (one key per line; blank lines
  // and lines starting with # skipped), --cors-origin ORIGIN.
  static StatusOr<AccessPolicy> Load(const std::string& key, const std::string& key_file,
                                     const std::string& cors_origin);

  // Whether a request to `path` with this Authorization header may go on.
  bool Authorized(std::string_view path, std::string_view authorization) const;
  // The CORS response headers for a request from `origin` (none when no
  // origin is configured or it is another one). preflight: an OPTIONS request.
  std::map<std::string, std::string> CorsHeaders(std::string_view origin, bool preflight) const;
};

// The 401 body, in OpenAI's error shape.
std::string UnauthorizedJson();

}  // namespace tandem
