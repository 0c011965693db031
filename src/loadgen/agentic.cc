#include "loadgen/agentic.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "common/env.h"
#include "common/splitmix.h"
#include "loadgen/stream_client.h"

namespace tandem {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

StatusOr<AgenticShape> AgenticPreset(const std::string& name) {
  AgenticShape s;
  if (name == "small") {
    // This 2-core machine: the shape scaled down (1.3k tokens growing by
    // ~100 per round) so a sweep with verification takes a minute or two.
    s.initial_tokens = 1280;
    s.rounds = 3;
    s.gen_tokens = 16;
    s.tool_min = 16;
    s.tool_max = 32;
    s.think_ms = 20;
    s.request_timeout_s = 120;
    s.sweep = {4, 8, 16, 32};
  } else if (name == "medium") {
    s.initial_tokens = 2048;
    s.rounds = 8;
    s.gen_tokens = 128;
    s.tool_min = 300;
    s.tool_max = 500;
    s.think_ms = 200;
    s.request_timeout_s = 300;
    s.sweep = {8, 16, 32};
  } else if (name == "incident") {
    // The incident's shape scaled to fit this class of machine: a 2k start
    // growing past 32k (2048 + 60 x (128 generated + 300..500 tool + the
    // chat template) = 34k..41k) at 16, 48 and 80 sessions. Run it against
    // the `micro` model (two layers, one KV head) with serve --ctx-size 49152;
    // `production` keeps the full generation length.
    s.initial_tokens = 2048;
    s.rounds = 60;
    s.gen_tokens = 128;
    s.tool_min = 300;
    s.tool_max = 500;
    s.think_ms = 200;
    s.request_timeout_s = 900;
    s.sweep = {16, 48, 80};
  } else if (name == "production") {
    // 2048 + 40 rounds x (1536 generated + ~400 tool) ~= 80k tokens at the end.
    s.initial_tokens = 2048;
    s.rounds = 40;
    s.gen_tokens = 1536;
    s.tool_min = 300;
    s.tool_max = 500;
    s.think_ms = 1000;
    s.request_timeout_s = 900;
    s.sweep = {16, 32, 48, 64, 80};
  } else {
    return InvalidArgument("unknown agentic preset '" + name + "' (small, medium, incident, production)");
  }
  return s;
}

std::string SyntheticText(uint64_t seed, int64_t tokens, double tokens_per_word) {
  const int64_t words = std::max<int64_t>(1, int64_t(double(tokens) / std::max(0.05, tokens_per_word) + 0.5));
  static const char* kWords[] = {
      "the",     "function", "returns", "a",       "value",   "when",    "cache",   "page",    "request",
      "server",  "writes",   "reads",   "every",   "layer",   "before",  "after",   "index",   "token",
      "error",   "test",     "build",   "file",    "line",    "module",  "config",  "thread",  "queue",
      "handler", "buffer",   "offset",  "length",  "check",   "result",  "output",  "input",   "list",
      "state",   "update",  "branch",   "commit",  "merge",   "review",  "patch",   "fix",     "bug",
      "memory",  "decode",  "prefill",  "model",   "weight",  "kernel",  "vector",  "matrix",  "batch",
      "stream",  "socket",  "timeout",  "retry",   "signal",  "worker",  "router",  "metric",  "trace"};
  constexpr int kN = int(sizeof(kWords) / sizeof(kWords[0]));
  std::string out;
  uint64_t x = SplitMix64(seed);
  int64_t emitted = 0, in_sentence = 0;  // words and punctuation marks
  while (emitted < words) {
    x = SplitMix64(x);
    std::string w = kWords[x % kN];
    if (in_sentence == 0 && !w.empty()) w[0] = char(w[0] - 'a' + 'A');
    if (!out.empty()) out += ' ';
    out += w;
    ++emitted;
    if (++in_sentence >= 6 + int64_t((x >> 20) % 10)) {
      out += (x >> 40) % 5 == 0 ? "?" : ".";
      ++emitted;
      in_sentence = 0;
    }
  }
  if (in_sentence != 0) out += '.';
  return out;
}

// ---------------------------------------------------------------- records

StatusOr<double> CalibrateTokensPerWord(const std::string& host, int port, const std::string& model) {
  constexpr int64_t kWords = 400;
  auto prompt_tokens = [&](const std::string& text) -> StatusOr<int64_t> {
    Json body = {{"model", model},
                 {"messages", {{{"role", "user"}, {"content", text}}}},
                 {"max_tokens", 1},
                 {"temperature", 0}};
    StreamTiming t = StreamChat(host, port, body, 120);
    if (t.status != 200 || !t.error.empty() || t.prompt_tokens <= 0) {
      return Unavailable("calibration request failed (HTTP " + std::to_string(t.status) + "): " +
                         (t.error.empty() ? "no usage in the answer" : t.error));
    }
    return t.prompt_tokens;
  };
  TANDEM_ASSIGN_OR_RETURN(int64_t base, prompt_tokens("Hi."));
  TANDEM_ASSIGN_OR_RETURN(int64_t full, prompt_tokens(SyntheticText(12345, kWords) + " Hi."));
  if (full <= base) return Unavailable("calibration: the longer prompt did not have more tokens");
  return double(full - base) / double(kWords);
}

Json ToJson(const RoundRecord& r) {
  Json j;
  j["type"] = "round";
  j["point"] = r.point;
  j["concurrency"] = r.concurrency;
  j["session"] = r.session;
  j["round"] = r.round;
  j["append"] = r.append;
  j["request"] = r.request;
  j["http_status"] = r.http_status;
  j["outcome"] = r.outcome;
  j["error"] = r.error;
  j["text"] = r.text;
  if (r.has_token_ids) j["token_ids"] = r.token_ids;
  j["finish_reason"] = r.finish_reason;
  j["prompt_tokens"] = r.prompt_tokens;
  j["completion_tokens"] = r.completion_tokens;
  j["cached_tokens"] = r.cached_tokens;
  j["start_s"] = r.start_s;
  j["ttft_s"] = r.ttft_s;
  j["e2e_s"] = r.e2e_s;
  j["gaps_s"] = r.gaps_s;
  j["first_mismatch"] = r.first_mismatch;
  j["verify_note"] = r.verify_note;
  if (r.verify_s > 0) j["verify_s"] = r.verify_s;
  return j;
}

StatusOr<RoundRecord> RoundFromJson(const Json& j) {
  RoundRecord r;
  try {
    if (j.value("type", "") != "round") return InvalidArgument("not a round record");
    r.point = j.at("point").get<int>();
    r.concurrency = j.at("concurrency").get<int>();
    r.session = j.at("session").get<int>();
    r.round = j.at("round").get<int>();
    r.append = j.at("append");
    r.request = j.at("request");
    if (!r.append.is_array() || !r.request.is_object()) return InvalidArgument("'append' must be an array and 'request' an object");
    r.http_status = j.value("http_status", 0);
    r.outcome = j.at("outcome").get<std::string>();
    if (r.outcome != kOk && r.outcome != kCorrupt && r.outcome != kTimeout && r.outcome != kError &&
        r.outcome != kUnverified && r.outcome != kDrift) {
      return InvalidArgument("unknown outcome '" + r.outcome + "'");
    }
    r.error = j.value("error", "");
    r.text = j.value("text", "");
    if (j.contains("token_ids")) {
      r.token_ids = j["token_ids"].get<std::vector<int32_t>>();
      r.has_token_ids = true;
    }
    r.finish_reason = j.value("finish_reason", "");
    r.prompt_tokens = j.value("prompt_tokens", int64_t(0));
    r.completion_tokens = j.value("completion_tokens", int64_t(0));
    r.cached_tokens = j.value("cached_tokens", int64_t(0));
    r.start_s = j.value("start_s", 0.0);
    r.ttft_s = j.value("ttft_s", 0.0);
    r.e2e_s = j.value("e2e_s", 0.0);
    r.gaps_s = j.value("gaps_s", std::vector<double>{});
    r.first_mismatch = j.value("first_mismatch", int64_t(-1));
    r.verify_note = j.value("verify_note", "");
    r.verify_s = j.value("verify_s", 0.0);
  } catch (const Json::exception& e) {
    return InvalidArgument(std::string("bad round record: ") + e.what());
  }
  return r;
}

Json ToJson(const TranscriptHeader& h) {
  const AgenticShape& s = h.shape;
  return Json{{"type", "header"},
              {"format", "tandem-agentic-transcript/1"},
              {"model", h.model},
              {"server_attention", h.server_attention},
              {"server_context", h.server_context},
              {"server_chat_format", h.server_chat_format},
              {"server_numerics", h.server_numerics},
              {"preset", h.preset},
              {"shape",
               {{"initial_tokens", s.initial_tokens},
                {"rounds", s.rounds},
                {"gen_tokens", s.gen_tokens},
                {"tool_min", s.tool_min},
                {"tool_max", s.tool_max},
                {"think_ms", s.think_ms},
                {"seed", s.seed},
                {"request_timeout_s", s.request_timeout_s},
                {"tokens_per_word", s.tokens_per_word},
                {"extensions", s.extensions},
                {"sweep", s.sweep}}}};
}

StatusOr<TranscriptHeader> HeaderFromJson(const Json& j) {
  TranscriptHeader h;
  try {
    if (j.value("type", "") != "header" || j.value("format", "") != "tandem-agentic-transcript/1") {
      return InvalidArgument("the first line is not a tandem-agentic-transcript/1 header");
    }
    h.model = j.value("model", "");
    h.server_attention = j.contains("server_attention") ? j["server_attention"] : Json();
    h.server_context = j.value("server_context", int64_t(0));
    h.server_chat_format = j.value("server_chat_format", "");
    h.server_numerics = j.contains("server_numerics") ? j["server_numerics"] : nlohmann::json();
    h.preset = j.value("preset", "");
    const Json& s = j.at("shape");
    h.shape.initial_tokens = s.at("initial_tokens").get<int64_t>();
    h.shape.rounds = s.at("rounds").get<int>();
    h.shape.gen_tokens = s.at("gen_tokens").get<int>();
    h.shape.tool_min = s.at("tool_min").get<int>();
    h.shape.tool_max = s.at("tool_max").get<int>();
    h.shape.think_ms = s.at("think_ms").get<int>();
    h.shape.seed = s.at("seed").get<uint64_t>();
    h.shape.request_timeout_s = s.at("request_timeout_s").get<double>();
    h.shape.sweep = s.at("sweep").get<std::vector<int>>();
    h.shape.tokens_per_word = s.value("tokens_per_word", 1.0);
    h.shape.extensions = s.value("extensions", true);
  } catch (const Json::exception& e) {
    return InvalidArgument(std::string("bad transcript header: ") + e.what());
  }
  return h;
}

Status ReadTranscript(const std::string& path, TranscriptHeader* header, std::vector<RoundRecord>* rounds) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot open transcript '" + path + "'");
  std::string line;
  int64_t n = 0;
  bool have_header = false;
  rounds->clear();
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const Json j = Json::parse(line, nullptr, false);
    if (j.is_discarded()) return InvalidArgument(path + ":" + std::to_string(n) + ": not JSON");
    if (!have_header) {
      auto h = HeaderFromJson(j);
      if (!h.ok()) return InvalidArgument(path + ":" + std::to_string(n) + ": " + h.status().message());
      *header = std::move(h).value();
      have_header = true;
      continue;
    }
    auto r = RoundFromJson(j);
    if (!r.ok()) return InvalidArgument(path + ":" + std::to_string(n) + ": " + r.status().message());
    rounds->push_back(std::move(r).value());
  }
  if (!have_header) return InvalidArgument("transcript '" + path + "' has no header line");
  return Status::Ok();
}

Status WriteTranscript(const std::string& path, const TranscriptHeader& header,
                       const std::vector<RoundRecord>& rounds) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return Unavailable("cannot write transcript '" + path + "'");
  out << ToJson(header).dump() << '\n';
  for (const RoundRecord& r : rounds) out << ToJson(r).dump(-1, ' ', false, Json::error_handler_t::replace) << '\n';
  out.flush();
  if (!out) return Unavailable("writing transcript '" + path + "' failed");
  return Status::Ok();
}

Json MessagesForRound(const std::vector<const RoundRecord*>& session_rounds, size_t r) {
  Json messages = Json::array();
  for (size_t i = 0; i <= r && i < session_rounds.size(); ++i) {
    for (const auto& m : session_rounds[i]->append) messages.push_back(m);
  }
  return messages;
}

// ---------------------------------------------------------------- server state

namespace {

uint64_t SessionSeed(const AgenticShape& shape, int concurrency, int session) {
  return SplitMix64(shape.seed ^ SplitMix64(uint64_t(concurrency) * 1000003u + uint64_t(session)));
}

}  // namespace

void RunSession(const std::string& host, int port, const std::string& model, const AgenticShape& shape,
                int point, int concurrency, int session, Clock::time_point t0, PointProgress* progress,
                std::vector<RoundRecord>* out, const std::atomic<bool>* stop) {
  uint64_t seed = SessionSeed(shape, concurrency, session);
  Json messages = Json::array();
  Json append = Json::array();
  append.push_back({{"role", "system"},
                    {"content", "You are a coding agent working in a large repository. Notes so far:\n" +
                                    SyntheticText(seed, std::max<int64_t>(16, shape.initial_tokens - 48), shape.tokens_per_word)}});
  append.push_back({{"role", "user"},
                    {"content", "Task " + std::to_string(session) + ": " + SyntheticText(seed + 1, 24, shape.tokens_per_word)}});
  for (int r = 0; r < shape.rounds; ++r) {
    if (stop != nullptr && stop->load()) return;
    if (r > 0 && shape.think_ms > 0) {
      seed = SplitMix64(seed);
      std::this_thread::sleep_for(std::chrono::milliseconds(int64_t(seed % uint64_t(shape.think_ms + 1))));
    }
    for (const auto& m : append) messages.push_back(m);
    RoundRecord rec;
    rec.point = point;
    rec.concurrency = concurrency;
    rec.session = session;
    rec.round = r;
    rec.append = append;
    rec.request = {{"model", model},
                   {"max_tokens", shape.gen_tokens},
                   {"temperature", 0},
                   {"seed", SessionSeed(shape, concurrency, session) & 0xffffffffu}};
    if (shape.extensions) {
      rec.request["ignore_eos"] = true;
      rec.request["return_token_ids"] = true;
    }
    SendRound(host, port, messages, shape, t0, &rec);
    const bool ok = rec.outcome == kUnverified;
    const std::string answer = rec.text;
    out->push_back(std::move(rec));
    ++progress->rounds_done;
    if (!ok) {
      ++progress->failures;
      progress->rounds_done += shape.rounds - r - 1;  // the rest will not be sent
      return;
    }
    seed = SplitMix64(seed + uint64_t(r));
    const int64_t tool = shape.tool_min + int64_t(seed % uint64_t(std::max(1, shape.tool_max - shape.tool_min + 1)));
    append = Json::array();
    append.push_back({{"role", "assistant"}, {"content", answer}});
    append.push_back({{"role", "tool"},
                      {"tool_call_id", "call_" + std::to_string(session) + "_" + std::to_string(r)},
                      {"content", "Tool output:\n" + SyntheticText(seed, tool, shape.tokens_per_word)}});
  }
}

void SendRound(const std::string& host, int port, const Json& messages, const AgenticShape& shape,
               Clock::time_point t0, RoundRecord* out) {
  RoundRecord& rec = *out;
  {
    Json body = rec.request;
    body["messages"] = messages;
    rec.start_s = std::chrono::duration<double>(Env::Default().Now() - t0).count();
    StreamTiming t = StreamChat(host, port, body, shape.request_timeout_s, shape.extensions ? shape.resume_within_s : 0);
    rec.http_status = t.status;
    rec.text = std::move(t.text);
    rec.token_ids = std::move(t.token_ids);
    rec.has_token_ids = t.has_token_ids;
    rec.finish_reason = t.finish_reason;
    rec.prompt_tokens = t.prompt_tokens;
    rec.completion_tokens = t.completion_tokens;
    rec.cached_tokens = t.cached_tokens;
    rec.ttft_s = t.ttft_s;
    rec.e2e_s = t.e2e_s;
    rec.gaps_s = std::move(t.gaps_s);
    rec.error = t.error;
    const bool complete = t.status == 200 && t.error.empty() && !t.finish_reason.empty();
    if (t.timed_out) {
      rec.outcome = kTimeout;
      if (rec.error.empty()) rec.error = "no complete answer within " + std::to_string(shape.request_timeout_s) + " s";
    } else if (!complete) {
      rec.outcome = kError;
      if (rec.error.empty()) rec.error = "incomplete stream (HTTP " + std::to_string(t.status) + ")";
    } else {
      rec.outcome = kUnverified;
    }
  }
}

std::vector<RoundRecord> RunPoint(const std::string& host, int port, const std::string& model,
                                  const AgenticShape& shape, int point, int concurrency,
                                  PointProgress* progress) {
  progress->rounds_total = int64_t(concurrency) * shape.rounds;
  progress->rounds_done = 0;
  progress->failures = 0;
  std::vector<std::vector<RoundRecord>> per_session(static_cast<size_t>(concurrency));
  std::vector<std::thread> threads;
  const auto t0 = Env::Default().Now();
  for (int s = 0; s < concurrency; ++s) {
    threads.emplace_back([&, s] {
      RunSession(host, port, model, shape, point, concurrency, s, t0, progress, &per_session[size_t(s)]);
    });
  }
  for (auto& t : threads) t.join();
  std::vector<RoundRecord> all;
  for (auto& v : per_session) {
    for (auto& r : v) all.push_back(std::move(r));
  }
  return all;
}

}  // namespace tandem
