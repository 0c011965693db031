// The agentic workload: multi-turn agent sessions against an OpenAI-compatible
// server, the shape that breaks disaggregated serving.
//
// A session starts with a system prompt of about `initial_tokens` tokens and
// a task, then runs `rounds` rounds: the model generates `gen_tokens` tokens
// (ignore_eos, so every round is as long as asked), the client appends the
// answer and a tool result of `tool_min`..`tool_max` tokens, thinks for up to
// `think_ms`, and re-sends the whole conversation. Every text is a pure
// function of (seed, concurrency, session, round), so a run can be repeated.
//
// Each round becomes a RoundRecord (the messages it appended, the request's
// parameters, the output text and token ids, timings, outcome); a transcript
// is a JSONL file of them after one header line, and `tandem verify` judges
// each against the reference engine (loadgen/verify.h).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem {

struct AgenticShape {
  int64_t initial_tokens = 2048;  // system prompt + task, approximately
  int rounds = 8;
  int gen_tokens = 256;                // generated per round
  int tool_min = 300, tool_max = 500;  // tool-result tokens appended per round
  int think_ms = 0;                    // pause before each next round, up to this
  uint64_t seed = 1;
  double request_timeout_s = 120;  // client-side bound on one round's request
  // With extensions (a tandem server): a round's stream that breaks off (a
  // router restarting) resumes for up to this long (StreamChat); 0: never.
  double resume_within_s = 30;
  double tokens_per_word = 1.0;    // the server's tokenizer on SyntheticText (Calibrate)
  // Send "ignore_eos" and "return_token_ids" (tandem and vLLM understand them;
  // the OpenAI API itself rejects unknown fields). Without them answers may
  // end early and are judged by text.
  bool extensions = true;
  std::vector<int> sweep = {16, 32, 48, 64, 80};
};

// small: this 2-core machine in about a minute; medium; incident: 2k -> 34k..41k
// tokens at 16, 48 and 80 sessions, the incident's shape;
// production: 2k -> 80k tokens, 80 sessions (bigger machines).
StatusOr<AgenticShape> AgenticPreset(const std::string& name);

// About `tokens` tokens of deterministic English-like text, for a tokenizer
// that spends `tokens_per_word` tokens on each of its words.
std::string SyntheticText(uint64_t seed, int64_t tokens, double tokens_per_word = 1.0);

// Measures the server's tokens per SyntheticText word from the prompt_tokens
// of two one-token requests, so shapes are in the server's own tokens.
StatusOr<double> CalibrateTokensPerWord(const std::string& host, int port, const std::string& model);

// Outcomes, never conflated: a timeout says nothing about corruption.
inline constexpr const char* kOk = "ok";                  // verified bitwise identical
inline constexpr const char* kCorrupt = "corrupt";        // verified, differs
inline constexpr const char* kTimeout = "timeout";        // no complete answer in time
inline constexpr const char* kError = "error";            // refused or failed
inline constexpr const char* kUnverified = "unverified";  // answered; not (yet) judged
// Judged across numerics identities (invariant 9: another build, a mixed
// deployment, another engine): where the served tokens differ from the
// reference's, each is a near-tie of the reference's own choice. Numerical
// drift, not corruption, and not a bitwise match either.
inline constexpr const char* kDrift = "drift";

struct RoundRecord {
  int point = 0;  // index in the sweep
  int concurrency = 0;
  int session = 0;
  int round = 0;
  nlohmann::json append = nlohmann::json::array();   // messages added before this request
  nlohmann::json request = nlohmann::json::object();  // every body field but "messages"
  int http_status = 0;
  std::string outcome = kUnverified;
  std::string error;
  std::string text;
  std::vector<int32_t> token_ids;
  bool has_token_ids = false;  // the server sent them (tandem's return_token_ids)
  std::string finish_reason;
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  double start_s = 0;  // since the sweep point started
  double ttft_s = 0, e2e_s = 0;
  std::vector<double> gaps_s;
  // Set by verification.
  int64_t first_mismatch = -1;  // token index into the output; -1 when none
  std::string verify_note;
  double verify_s = 0;  // the reference's time on this round
};

nlohmann::json ToJson(const RoundRecord& r);
StatusOr<RoundRecord> RoundFromJson(const nlohmann::json& j);

// What a transcript's first line records about the run and the server.
struct TranscriptHeader {
  std::string model;                   // the id the server reported
  nlohmann::json server_attention;     // /v1/models "tandem.attention", or null
  int64_t server_context = 0;          // /v1/models "context_length", or 0
  std::string server_chat_format;      // /v1/models "tandem.chat_format" (ChatFormat::Identity), or ""
  // /v1/models "tandem.numerics" (model/numerics.h, NumericsIdentity::ToJson),
  // or null from a server (or a transcript) that does not say.
  nlohmann::json server_numerics;
  std::string preset;
  AgenticShape shape;
};
nlohmann::json ToJson(const TranscriptHeader& h);
StatusOr<TranscriptHeader> HeaderFromJson(const nlohmann::json& j);

// Reads a transcript written by `tandem bench agentic`.
Status ReadTranscript(const std::string& path, TranscriptHeader* header, std::vector<RoundRecord>* rounds);
Status WriteTranscript(const std::string& path, const TranscriptHeader& header,
                       const std::vector<RoundRecord>& rounds);

// The messages of one session's request in round r: every earlier append
// plus this round's, in order. `rounds` must hold the session's rounds 0..r.
nlohmann::json MessagesForRound(const std::vector<const RoundRecord*>& session_rounds, size_t r);

// ---------------------------------------------------------------- server state

struct ServerState {
  bool reachable = false;
  bool healthy = false;  // GET /health answered 200
  bool tandem = false;   // /metrics carries tandem's engine gauges
  // Sums over the engine(s) behind the endpoint (a router's backends included).
  int64_t running = 0, waiting = 0, reserved_pages = 0, used_pages = 0, prefix_pages = 0;
  int64_t handoffs_in_flight = 0, quarantined_pages = 0;
  // Disaggregated decode servers: seconds finished requests waited for their
  // handoffs, and their whole time (counters; a point's share is the ratio of
  // their growth over it).
  double handoff_s = 0, handoff_request_s = 0;
  // tandem_request_phase_seconds_total by phase (decode servers): where
  // finished requests' time went; the phases sum to handoff_request_s.
  std::map<std::string, double> phase_s;
  // "host:port started at T" for the server and each backend behind it that
  // exports tandem_process_start_time_seconds: a change means a restart.
  std::vector<std::string> instances;
  std::string detail;     // what is not at baseline, for messages
  std::string unchecked;  // what the server does not offer to check ("" : everything was checked)

  // Idle and with every page either free or held by the prefix cache.
  bool AtBaseline() const;
};

ServerState ProbeServer(const std::string& host, int port);

// The health gate before a sweep point: waits until the server answers
// /health 200 and (for tandem) nothing is running, waiting, reserved,
// quarantined or in a handoff. Fails with what was still wrong at the deadline.
Status WaitForBaseline(const std::string& host, int port, double deadline_s,
                       const std::function<void(const ServerState&)>& on_poll = {});

// The model id, the tandem attention extension and the context length (0
// when not reported) from GET /v1/models.
// chat_format (when given): /v1/models "tandem.chat_format", or "" from a server that does not say.
// numerics (when given): /v1/models "tandem.numerics", or null.
Status QueryModel(const std::string& host, int port, std::string* id, nlohmann::json* attention, int64_t* context,
                  std::string* chat_format = nullptr, nlohmann::json* numerics = nullptr);

// ---------------------------------------------------------------- running

struct PointProgress {
  std::atomic<int64_t> rounds_done{0}, rounds_total{0}, failures{0};
};

// Runs session `session` of a point (its texts are a pure function of the
// shape's seed, concurrency and session), appending its rounds to *out; no
// new round starts once *stop (if given) is set.
void RunSession(const std::string& host, int port, const std::string& model, const AgenticShape& shape,
                int point, int concurrency, int session, std::chrono::steady_clock::time_point t0,
                PointProgress* progress, std::vector<RoundRecord>* out, const std::atomic<bool>* stop = nullptr);

// Sends one round: rec->request plus `messages` as one streamed chat request
// (with resumption under extensions), filling in the answer, its timings and
// its outcome (unverified when complete, else timeout or error); start_s is
// measured from t0.
void SendRound(const std::string& host, int port, const nlohmann::json& messages, const AgenticShape& shape,
               std::chrono::steady_clock::time_point t0, RoundRecord* rec);

// Runs `concurrency` sessions at once (one thread each) and returns every
// round they sent, sorted by (session, round). A session stops at its first
// failed round (later rounds would depend on an answer it never got).
std::vector<RoundRecord> RunPoint(const std::string& host, int port, const std::string& model,
                                  const AgenticShape& shape, int point, int concurrency,
                                  PointProgress* progress);

}  // namespace tandem
