// A small HTTP client for end-to-end tests (cpp-httplib), with SSE helpers.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace tandem::testing {

struct HttpResult {
  int status = 0;  // 0: no response (connection failed)
  std::string body;
  std::map<std::string, std::string> headers;
};

HttpResult HttpGet(int port, const std::string& path);
// `bearer`: sent as 'Authorization: Bearer <it>' when not empty.
HttpResult HttpPost(int port, const std::string& path, const std::string& body,
                    const std::string& content_type = "application/json", const std::string& bearer = "");
// Streams a POST; on_data gets each received piece and returns false to hang
// up (the server must notice and cancel). Returns the status.
int HttpPostStream(int port, const std::string& path, const std::string& body,
                   const std::function<bool(const std::string&)>& on_data);

// Sends a POST and hangs up after `wait_ms` without reading the answer (a
// client that gave up). Returns once the connection is closed.
void HttpPostAndHangUp(int port, const std::string& path, const std::string& body, int wait_ms);

// The "data: ..." payloads of an SSE body, in order ("[DONE]" included).
std::vector<std::string> SseData(const std::string& body);

// Parses Prometheus text: metric name with labels exactly as printed
// (e.g. tandem_cache_pages{state="used"}) -> value. Fails the test on a
// malformed line.
std::map<std::string, double> ParseMetrics(const std::string& text);

}  // namespace tandem::testing
