// A streaming OpenAI chat client that times every chunk: the measuring half
// of `tandem bench serve` and of the agentic load generator.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tandem {

struct StreamTiming {
  int status = 0;                // HTTP status; 0 when the connection failed
  std::string text;              // the streamed content
  std::string finish_reason;
  std::string error;             // what went wrong, if anything
  double ttft_s = 0;             // request sent -> first content chunk
  double e2e_s = 0;              // request sent -> [DONE]
  std::vector<double> gaps_s;    // between consecutive content chunks
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  std::vector<int32_t> token_ids;  // when the server sends them (return_token_ids)
  bool has_token_ids = false;
  bool timed_out = false;  // our timeout_s passed, or the server said 504 / deadline
  bool server_timeout = false;  // the stream ended with an error whose code is "timeout"
  int resumes = 0;              // times the stream was asked again after it broke off (resume_within_s)
};

// POSTs `body` (stream is forced on, with usage) to /v1/chat/completions and
// records the timing of each chunk. timeout_s bounds the whole request.
// resume_within_s > 0: the stream is traced (tandem_trace), and one that
// breaks off — its connection lost, or refused or answered 502/503 while
// the server (a router) restarts — is asked again with tandem_resume, the
// tokens it has, retrying every 100 ms until this long has passed since it
// broke; it goes on where it stopped (n = 1 only).
StreamTiming StreamChat(const std::string& host, int port, nlohmann::json body, double timeout_s,
                        double resume_within_s = 0);

// p in [0, 100]; 0 for an empty sample.
double Percentile(std::vector<double> values, double p);

}  // namespace tandem
