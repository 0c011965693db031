#include "support/http_client.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <sstream>

namespace tandem::testing {

HttpResult HttpGet(int port, const std::string& path) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(120, 0);
  HttpResult r;
  if (auto res = cli.Get(path.c_str())) {
    r.status = res->status;
    r.body = res->body;
    for (const auto& [k, v] : res->headers) r.headers[k] = v;
  }
  return r;
}

HttpResult HttpPost(int port, const std::string& path, const std::string& body,
                    const std::string& content_type, const std::string& bearer) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(120, 0);
  cli.set_write_timeout(120, 0);
  HttpResult r;
  httplib::Headers headers;
  if (!bearer.empty()) headers.emplace("Authorization", "Bearer " + bearer);
  auto res = cli.Post(path.c_str(), headers, body, content_type.c_str());
  if (res) {
    r.status = res->status;
    r.body = res->body;
    for (const auto& [k, v] : res->headers) r.headers[k] = v;
  } else {
    r.body = "no response: " + httplib::to_string(res.error());
  }
  return r;
}

int HttpPostStream(int port, const std::string& path, const std::string& body,
                   const std::function<bool(const std::string&)>& on_data) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(120, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    return on_data(std::string(data, n));
  };
  httplib::Response res;
  httplib::Error err;
  const bool ok = cli.send(req, res, err);
  return ok ? res.status : (res.status > 0 ? res.status : -1);
}

void HttpPostAndHangUp(int port, const std::string& path, const std::string& body, int wait_ms) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(0, wait_ms * 1000);
  (void)cli.Post(path.c_str(), body, "application/json");
}

std::vector<std::string> SseData(const std::string& body) {
  std::vector<std::string> out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("data: ", 0) == 0) out.push_back(line.substr(6));
  }
  return out;
}

std::map<std::string, double> ParseMetrics(const std::string& text) {
  std::map<std::string, double> m;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    EXPECT_NE(space, std::string::npos) << "malformed metrics line: " << line;
    if (space == std::string::npos) continue;
    m[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return m;
}

}  // namespace tandem::testing
