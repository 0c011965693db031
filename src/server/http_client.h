// An HTTP/1.1 client (the router's forwards, the front-door bench), event-driven on its own I/O
// thread (Boost.Beast; no Boost type is visible here), so a relayed stream
// costs a socket, not a thread. A call reports the answer's status line,
// then its body as it arrives (chunked encoding removed), then its end; the
// whole call has one deadline, and Cancel() ends it at once (closing the
// connection, which the decode server sees as a hang-up).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "server/http_core.h"

namespace tandem {

struct HttpClientRequest {
  std::string host;
  int port = 0;
  std::string method = "POST", target;
  HttpHeaders headers;  // Host, Content-Length and Connection are added
  std::string body;
  std::chrono::milliseconds timeout{600'000};  // the whole call
};

struct HttpClientEvents {
  // The answer's status and headers (not called when none came).
  std::function<void(int status, const HttpHeaders& headers)> on_head;
  // Body bytes as they arrive; false ends the call.
  std::function<bool(std::string data)> on_data;
  // Last, exactly once: "" when the answer ended normally, else what went wrong.
  std::function<void(const std::string& error)> on_done;
};

class HttpCall {
 public:
  virtual ~HttpCall() = default;
  virtual void Cancel() = 0;  // any thread; on_done runs with "cancelled" unless it ran already
};

class HttpClient {
 public:
  HttpClient();
  ~HttpClient();  // Stop()
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  std::shared_ptr<HttpCall> Start(HttpClientRequest request, HttpClientEvents events);
  // Runs `fn` on the client's I/O thread once `delay` has passed; never if
  // the client stops first (then `fn` is destroyed unrun).
  void After(std::chrono::milliseconds delay, std::function<void()> fn);
  // Ends every call (their on_done run) and joins the I/O thread. Idempotent.
  void Stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
