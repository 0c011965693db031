#include "loadgen/trace.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "common/env.h"
#include "common/splitmix.h"

namespace tandem {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int64_t kMaxLines = 1'000'000;
constexpr size_t kMaxLineBytes = 16u << 20;
constexpr int64_t kMaxInputTokens = 1 << 20;
constexpr size_t kMaxListed = 4096;  // hash ids of a request, turns of a conversation
constexpr int64_t kMooncakeBlockTokens = 512;
constexpr size_t kMaxTraceTextBytes = size_t(256) << 20;  // every prompt the trace makes, together

Status LineError(int64_t line, const std::string& what) {
  return InvalidArgument("trace line " + std::to_string(line) + ": " + what);
}

// A non-negative integer field no larger than `max`.
StatusOr<int64_t> Count(const Json& j, const char* field, int64_t max, int64_t line, int64_t fallback = -1) {
  if (!j.contains(field)) {
    if (fallback >= 0) return fallback;
    return LineError(line, std::string("no \"") + field + "\"");
  }
  const Json& v = j[field];
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > max) {
    return LineError(line, std::string("\"") + field + "\" must be an integer in [0, " + std::to_string(max) + "]");
  }
  return v.get<int64_t>();
}

int64_t Scaled(int64_t n, double scale) { return std::max<int64_t>(1, int64_t(std::llround(double(n) * scale))); }

Status AddMooncake(const Json& j, int64_t line, const TraceOptions& o, std::map<int64_t, int>* uses, Trace* t) {
  TANDEM_ASSIGN_OR_RETURN(int64_t timestamp, Count(j, "timestamp", int64_t(1) << 50, line));
  TANDEM_ASSIGN_OR_RETURN(int64_t input, Count(j, "input_length", kMaxInputTokens, line));
  TANDEM_ASSIGN_OR_RETURN(int64_t output, Count(j, "output_length", kMaxInputTokens, line));
  std::vector<int64_t> ids;
  if (j.contains("hash_ids")) {
    const Json& h = j["hash_ids"];
    if (!h.is_array() || h.size() > kMaxListed) return LineError(line, "\"hash_ids\" must be a list of at most 4096 ids");
    for (const Json& id : h) {
      if (!id.is_number_integer()) return LineError(line, "a hash id is not an integer");
      ids.push_back(id.get<int64_t>());
    }
  }
  if (input > int64_t(ids.size()) * kMooncakeBlockTokens && !ids.empty()) {
    return LineError(line, "input_length " + std::to_string(input) + " is more than its " +
                               std::to_string(ids.size()) + " blocks of 512 tokens");
  }
  // The prompt: each block's text (a pure function of its id), the last one
  // cut to the request's length; without ids, text of the line's own.
  const int64_t block = Scaled(kMooncakeBlockTokens, o.length_scale);
  const int64_t want = std::min(Scaled(input, o.length_scale), kMaxInputTokens);
  std::string prompt;
  if (ids.empty()) {
    prompt = SyntheticText(SplitMix64(0x6d6f6f6e63616b65ull ^ uint64_t(line)), want, o.tokens_per_word);
  } else {
    for (size_t b = 0; b < ids.size(); ++b) {
      const int64_t left = want - int64_t(b) * block;
      if (left <= 0) break;
      ++(*uses)[ids[b]];
      prompt += SyntheticText(SplitMix64(0x626c6f636bull ^ uint64_t(ids[b])), std::min(block, left), o.tokens_per_word);
      prompt += "\n";
    }
  }
  TraceTurn turn;
  turn.at_s = double(timestamp) / 1000.0;
  turn.text = std::move(prompt);
  turn.max_tokens = int(std::min<int64_t>(Scaled(output, o.length_scale), o.max_output_tokens));
  t->sessions.push_back({"request-" + std::to_string(line), {std::move(turn)}});
  return Status::Ok();
}

Status AddConversation(const Json& j, int64_t line, const TraceOptions& o, Trace* t) {
  if (!j.contains("turns") || !j["turns"].is_array() || j["turns"].empty() || j["turns"].size() > kMaxListed) {
    return LineError(line, "\"turns\" must be a list of 1 to 4096 turns");
  }
  TraceSession s;
  s.id = j.contains("session_id") && j["session_id"].is_string() ? j["session_id"].get<std::string>().substr(0, 200)
                                                                  : "conversation-" + std::to_string(line);
  for (const Json& turn : j["turns"]) {
    if (!turn.is_object() || !turn.contains("text") || !turn["text"].is_string()) {
      return LineError(line, "every turn needs a string \"text\"");
    }
    TraceTurn u;
    u.text = turn["text"].get<std::string>();
    TANDEM_ASSIGN_OR_RETURN(int64_t output, Count(turn, "output_length", kMaxInputTokens, line, 64));
    TANDEM_ASSIGN_OR_RETURN(int64_t delay, Count(turn, "delay", int64_t(1) << 40, line, 0));
    TANDEM_ASSIGN_OR_RETURN(int64_t at, Count(turn, "timestamp", int64_t(1) << 50, line, 0));
    u.max_tokens = int(std::min<int64_t>(Scaled(output, o.length_scale), o.max_output_tokens));
    u.delay_s = double(delay) / 1000.0;
    u.at_s = s.turns.empty() ? double(at) / 1000.0 : -1;
    s.turns.push_back(std::move(u));
  }
  t->sessions.push_back(std::move(s));
  return Status::Ok();
}

}  // namespace

StatusOr<Trace> LoadTrace(const std::string& path, const TraceOptions& o) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot read trace " + path);
  if (!(o.length_scale > 0) || o.length_scale > 16) return InvalidArgument("the trace's length scale must be in (0, 16]");
  Trace t;
  t.format = o.format;
  std::map<int64_t, int> uses;
  std::string text;
  // A line is read with its bound applied while reading: a file of one
  // endless line costs 16 MiB, not the whole file.
  auto next_line = [&] {
    text.clear();
    for (int c; (c = in.get()) != std::char_traits<char>::eof();) {
      if (c == '\n') return true;
      if (text.size() > kMaxLineBytes) return true;  // over the bound: refused below, unread past it
      text.push_back(char(c));
    }
    return !text.empty();
  };
  for (int64_t line = 1; next_line(); ++line) {
    if (line > kMaxLines) return LineError(line, "more than 1,000,000 lines");
    if (text.size() > kMaxLineBytes) return LineError(line, "longer than 16 MiB");
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const Json j = Json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return LineError(line, "not a JSON object");
    if (t.format.empty()) t.format = j.contains("turns") ? "conversations" : "mooncake";
    if (t.format == "mooncake") {
      TANDEM_RETURN_IF_ERROR(AddMooncake(j, line, o, &uses, &t));
    } else if (t.format == "conversations") {
      TANDEM_RETURN_IF_ERROR(AddConversation(j, line, o, &t));
    } else {
      return InvalidArgument("trace format must be mooncake or conversations, not '" + t.format + "'");
    }
    t.requests += int64_t(t.sessions.back().turns.size());
    for (const TraceTurn& turn : t.sessions.back().turns) t.text_bytes += turn.text.size();
    if (t.text_bytes > kMaxTraceTextBytes) {
      return LineError(line, "the trace's prompts pass 256 MiB of text (use --trace-limit or --trace-scale)");
    }
    if (o.limit > 0 && t.requests >= o.limit) break;
  }
  if (t.sessions.empty()) return InvalidArgument("trace " + path + " has no requests");
  for (const auto& [id, n] : uses) t.shared_blocks += n > 1;
  std::stable_sort(t.sessions.begin(), t.sessions.end(),
                   [](const TraceSession& a, const TraceSession& b) { return a.turns[0].at_s < b.turns[0].at_s; });
  return t;
}

double TraceSeconds(const Trace& trace, double speed) {
  if (!(speed > 0) || trace.sessions.empty()) return 0;
  double first = trace.sessions.front().turns[0].at_s, last = first, delays = 0;
  for (const TraceSession& s : trace.sessions) {
    last = std::max(last, s.turns[0].at_s);
    double own = 0;
    for (const TraceTurn& t : s.turns) own += t.delay_s;
    delays = std::max(delays, own);
  }
  return (last - first + delays) / speed;
}

std::vector<RoundRecord> RunTrace(const std::string& host, int port, const std::string& model, const Trace& trace,
                                  const AgenticShape& shape, int point, int workers, double speed,
                                  PointProgress* progress) {
  progress->rounds_total = trace.requests;
  progress->rounds_done = 0;
  progress->failures = 0;
  std::vector<std::vector<RoundRecord>> per_session(trace.sessions.size());
  std::atomic<size_t> next{0};
  const auto t0 = Env::Default().Now();
  const double first = trace.sessions.front().turns[0].at_s;
  // REQUIRES (the caller checked): TraceSeconds(trace, speed) is a sane
  // number of seconds, so no sleep below overflows or outlasts the run.
  auto run = [&](size_t s) {
    const TraceSession& session = trace.sessions[s];
    if (speed > 0) {  // the trace's own pace, scaled
      std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>((session.turns[0].at_s - first) / speed)));
    }
    Json messages = Json::array(), append = Json::array();
    for (size_t r = 0; r < session.turns.size(); ++r) {
      const TraceTurn& turn = session.turns[r];
      if (r > 0 && turn.delay_s > 0) {
        std::this_thread::sleep_for(std::chrono::duration<double>(speed > 0 ? turn.delay_s / speed : 0));
      }
      append.push_back({{"role", "user"}, {"content", turn.text}});
      for (const Json& m : append) messages.push_back(m);
      RoundRecord rec;
      rec.point = point;
      rec.concurrency = workers;
      rec.session = int(s);
      rec.round = int(r);
      rec.append = append;
      rec.request = {{"model", model},
                     {"max_tokens", turn.max_tokens},
                     {"temperature", 0},
                     {"seed", SplitMix64(uint64_t(s) + 1) & 0xffffffffu}};
      if (shape.extensions) {
        rec.request["ignore_eos"] = true;
        rec.request["return_token_ids"] = true;
      }
      SendRound(host, port, messages, shape, t0, &rec);
      const bool ok = rec.outcome == kUnverified;
      append = Json::array({{{"role", "assistant"}, {"content", rec.text}}});
      per_session[s].push_back(std::move(rec));
      ++progress->rounds_done;
      if (!ok) {  // later turns would build on an answer that never came
        ++progress->failures;
        progress->rounds_done += int64_t(session.turns.size() - r - 1);
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < std::max(1, workers); ++w) {
    threads.emplace_back([&] {
      for (size_t s = next++; s < trace.sessions.size(); s = next++) run(s);
    });
  }
  for (auto& th : threads) th.join();
  std::vector<RoundRecord> all;
  for (auto& v : per_session) {
    for (auto& r : v) all.push_back(std::move(r));
  }
  return all;
}

}  // namespace tandem
