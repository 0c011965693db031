#include "loadgen/differential.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <string_view>

#include "common/env.h"
#include "model/unicode.h"

namespace tandem {
namespace {

using Json = nlohmann::json;

// A logprobs entry's exact bytes ("bytes" when the server sends them, else its text).
std::string EntryText(const Json& e) {
  return e.is_object() && e.contains("token") && e["token"].is_string() ? e["token"].get<std::string>() : std::string();
}

std::string EntryBytes(const Json& e) {
  if (e.is_object() && e.contains("bytes") && e["bytes"].is_array()) {
    std::string out;
    for (const Json& b : e["bytes"]) {
      if (!b.is_number_integer()) return EntryText(e);
      out += char(b.get<int64_t>() & 0xff);
    }
    return out;
  }
  return EntryText(e);
}

// A missing or null logprob (some servers write -inf as null) is as unlikely as it gets.
double EntryLogprob(const Json& e) {
  return e.is_object() && e.contains("logprob") && e["logprob"].is_number() ? e["logprob"].get<double>() : -1e30;
}

// Whether `bytes` are not whole valid UTF-8 on their own: an incomplete or
// invalid sequence, which a server's text shows as U+FFFD (or not yet at all).
bool NotWholeUtf8(const std::string& bytes) {
  for (size_t pos = 0; pos < bytes.size();) {
    unicode::SequenceStatus status;
    const int n = unicode::ClassifySequence(bytes, pos, &status);
    if (status != unicode::SequenceStatus::kComplete) return true;
    pos += size_t(n);
  }
  return false;
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD, as a server renders broken UTF-8

std::string Shown(std::string s) {
  if (s.size() > 24) s = s.substr(0, 24) + "...";
  return "'" + s + "'";
}

}  // namespace

Divergence Compare(const Json& reference, const std::string& reference_text, const std::string& served,
                   const std::string& served_finish, double near_tie_nats) {
  Divergence d;
  // Without the served ids a reference token can match the served text while
  // the server took a longer alternative there (" " where it took " for"):
  // the last such place is where the texts really parted if the walk fails later.
  struct Ambiguous {
    int64_t token = -1;
    std::string reference, taken;
    double margin = 0;
  } ambiguous;
  auto top_of = [](const Json& e) {
    return e.is_object() && e.contains("top_logprobs") && e["top_logprobs"].is_array() ? e["top_logprobs"]
                                                                                        : Json::array();
  };
  size_t pos = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    const Json& e = reference[i];
    const std::string t = EntryBytes(e);
    // Zero-width tokens (end of turn, control tokens past ignore_eos) spell nothing.
    if (t.empty() || served.compare(pos, t.size(), t) == 0) {
      for (const Json& alt : top_of(e)) {
        const std::string a = EntryBytes(alt);
        if (a.size() <= t.size() || served.compare(pos, a.size(), a) != 0) continue;
        const double margin = EntryLogprob(e) - EntryLogprob(alt);
        if (ambiguous.token == int64_t(i) && margin >= ambiguous.margin) continue;
        ambiguous = {int64_t(i), t, a, margin};
      }
      pos += t.size();
      continue;
    }
    if (pos == served.size() && served_finish == "length") {
      d.kind = Divergence::Kind::kUnjudged;
      d.token = int64_t(i);
      d.detail = "the served answer stops at reference token " + std::to_string(i) +
                 " with finish \"length\" (its context or token limit): nothing after it to judge";
      return d;
    }
    // The texts part at reference token i: which alternative did the server take?
    const std::string rest = served.substr(pos);
    const double best = EntryLogprob(e);
    int rank = -1;
    double taken = 0;
    std::string taken_text;
    const Json top = top_of(e);
    // Without the served token ids only the text says which alternative was
    // taken: the longest one the served text starts with (" aardvark" over " a").
    for (size_t k = 0; k < top.size(); ++k) {
      const std::string a = EntryBytes(top[k]);
      if (a == t) continue;  // the reference's own choice
      const bool matches = a.empty() ? rest.empty() : rest.compare(0, a.size(), a) == 0;
      if (!matches) continue;
      if (rank >= 0 && (a.size() < taken_text.size() || (a.size() == taken_text.size() && EntryLogprob(top[k]) <= taken))) {
        continue;
      }
      rank = int(k);
      taken = EntryLogprob(top[k]);
      taken_text = a;
    }
    d.token = int64_t(i);
    // Inside broken UTF-8 the text cannot show which bytes a server took: it
    // shows U+FFFD for any incomplete or invalid sequence. Judged by the bytes:
    // an alternative whose bytes would render so is the one taken (the most
    // likely such), and its margin decides; if only the reference's own
    // choice would, the texts cannot tell the tokens apart (not judged).
    if (rank < 0 && rest.compare(0, kReplacement.size(), kReplacement) == 0) {
      if (NotWholeUtf8(t)) {  // the server may well have taken t itself and parted later
        d.kind = Divergence::Kind::kUnjudged;
        d.detail = "token " + std::to_string(i) + ": the server's text shows U+FFFD where the reference's own token " +
                   "is an incomplete UTF-8 sequence: its text cannot say which bytes it took (not judged)";
        return d;
      }
      int broken = -1;
      for (size_t k = 0; k < top.size(); ++k) {
        const std::string a = EntryBytes(top[k]);
        if (a == t || !NotWholeUtf8(a)) continue;
        if (broken < 0 || EntryLogprob(top[k]) > EntryLogprob(top[size_t(broken)])) broken = int(k);
      }
      if (broken >= 0) {
        d.margin = best - EntryLogprob(top[size_t(broken)]);
        const bool tie = d.margin <= near_tie_nats;
        d.kind = tie ? Divergence::Kind::kNearTie : Divergence::Kind::kCorrupt;
        char m[32];
        std::snprintf(m, sizeof(m), "%.4g", d.margin);
        d.detail = "token " + std::to_string(i) + ": the server's text shows U+FFFD (broken UTF-8) where the " +
                   "reference has " + Shown(t) + "; by the bytes, its alternative of rank " + std::to_string(broken + 1) +
                   " is an incomplete sequence, " + m + " nats below" +
                   (tie ? ": a near-tie, numerical drift; not judged past it" : "");
        return d;
      }
    }
    if ((rank < 0 || best - taken > near_tie_nats) && ambiguous.token >= 0 && ambiguous.margin <= near_tie_nats) {
      char m[32];
      std::snprintf(m, sizeof(m), "%.4g", ambiguous.margin);
      d.kind = Divergence::Kind::kNearTie;
      d.token = ambiguous.token;
      d.margin = ambiguous.margin;
      d.detail = "token " + std::to_string(ambiguous.token) + ": the server took " + Shown(ambiguous.taken) + ", " + m +
                 " nats below the reference's " + Shown(ambiguous.reference) +
                 " (the texts part at token " + std::to_string(i) + "): a near-tie, numerical drift; not judged past it";
      return d;
    }
    if (rank < 0) {
      d.kind = Divergence::Kind::kCorrupt;
      d.margin = 1e30;
      d.detail = "token " + std::to_string(i) + ": the server continues with " +
                 (rest.empty() ? std::string("the end of its answer") : Shown(rest)) + ", not among the reference's top " +
                 std::to_string(top.size()) + " (reference: " + Shown(t) + ")";
      return d;
    }
    d.margin = best - taken;
    const bool tie = d.margin <= near_tie_nats;
    d.kind = tie ? Divergence::Kind::kNearTie : Divergence::Kind::kCorrupt;
    char m[32];
    std::snprintf(m, sizeof(m), "%.4g", d.margin);
    d.detail = "token " + std::to_string(i) + ": the server took " + Shown(taken_text) + " (rank " +
               std::to_string(rank + 1) + " at the reference, " + m + " nats below its " + Shown(t) + ")" +
               (tie ? ": a near-tie, numerical drift; not judged past it" : "");
    return d;
  }
  if (pos < served.size()) {
    d.kind = Divergence::Kind::kUnjudged;
    d.token = int64_t(reference.size());
    d.detail = "the reference's answer (" + std::to_string(reference_text.size()) +
               " bytes) ends inside the served one (" + std::to_string(served.size()) + " bytes)";
  }
  return d;
}

namespace {

void JudgeOnce(const DifferentialOptions& o, const Json& messages, RoundRecord* round) {
  round->first_mismatch = -1;
  const Json temperature = round->request.value("temperature", Json(1.0));
  if (!temperature.is_number() || temperature.get<double>() != 0.0) {
    round->outcome = kUnverified;
    round->verify_note = "sampled (temperature > 0): the differential oracle judges greedy rounds only";
    return;
  }
  Json body = round->request;
  body["messages"] = messages;
  body["model"] = o.model;
  body["stream"] = false;
  body["temperature"] = 0;
  body["logprobs"] = true;
  body["top_logprobs"] = o.top_logprobs;
  body.erase("return_token_ids");
  body.erase("stream_options");
  httplib::Client cli(o.host, o.port);
  const auto timeout = std::chrono::milliseconds(int64_t(o.timeout_s * 1000));
  cli.set_connection_timeout(std::chrono::seconds(5));
  cli.set_read_timeout(std::chrono::duration_cast<std::chrono::seconds>(timeout));
  cli.set_write_timeout(std::chrono::seconds(60));
  auto res = cli.Post("/v1/chat/completions", body.dump(), "application/json");
  auto error = [&](const std::string& why) {
    round->outcome = kError;
    round->verify_note = "the reference could not judge this round: " + why;
  };
  if (!res) return error("no answer from http://" + o.host + ":" + std::to_string(o.port) + " (" + httplib::to_string(res.error()) + ")");
  if (res->status != 200) return error("HTTP " + std::to_string(res->status) + ": " + res->body.substr(0, 300));
  const Json j = Json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("choices") || !j["choices"].is_array() ||
      j["choices"].empty() || !j["choices"][0].is_object()) {
    return error("its answer is not a chat completion");
  }
  const Json& choice = j["choices"][0];
  const Json* message = choice.contains("message") && choice["message"].is_object() ? &choice["message"] : nullptr;
  const std::string text = message && message->contains("content") && (*message)["content"].is_string()
                               ? (*message)["content"].get<std::string>() : std::string();
  const Json* lp = choice.contains("logprobs") ? &choice["logprobs"] : nullptr;
  if (!lp || !lp->is_object() || !lp->contains("content") || !(*lp)["content"].is_array()) {
    return error("it did not return logprobs (a reference must report logprobs and top_logprobs)");
  }
  if (text == round->text) {
    round->outcome = kOk;
    round->verify_note = "text identical to the reference (" + std::to_string((*lp)["content"].size()) + " tokens)";
    return;
  }
  const Divergence d = Compare((*lp)["content"], text, round->text, round->finish_reason, o.near_tie_nats);
  switch (d.kind) {
    case Divergence::Kind::kSame:
      round->outcome = kOk;
      break;
    case Divergence::Kind::kNearTie:
      round->outcome = kDrift;
      round->first_mismatch = d.token;
      break;
    case Divergence::Kind::kCorrupt:
      round->outcome = kCorrupt;
      round->first_mismatch = d.token;
      break;
    case Divergence::Kind::kUnjudged:
      round->outcome = kUnverified;
      break;
  }
  round->verify_note = d.kind == Divergence::Kind::kSame ? "the reference's text agrees" : d.detail;
}

}  // namespace

void JudgeAgainstReference(const DifferentialOptions& o, const Json& messages, RoundRecord* round) {
  try {
    JudgeOnce(o, messages, round);
  } catch (const Json::exception& e) {
    // Every read checks its type; this is a missed check on the reference's reply.
    round->outcome = kError;
    round->first_mismatch = -1;
    round->verify_note = std::string("the reference's answer could not be read: ") + e.what();
  }
}

Status VerifyRoundsAgainstReference(const DifferentialOptions& options, std::vector<RoundRecord>* rounds,
                                    const std::function<void(const VerifyProgress&)>& on_progress) {
  DifferentialOptions o = options;
  if (o.model.empty()) {
    Json attention;
    int64_t context = 0;
    TANDEM_RETURN_IF_ERROR(QueryModel(o.host, o.port, &o.model, &attention, &context));
  }
  TANDEM_ASSIGN_OR_RETURN(SessionRounds sessions, GroupSessions(rounds));
  VerifyProgress progress;
  for (const RoundRecord& r : *rounds) progress.rounds_total += Judgeable(r);
  const auto t0 = Env::Default().Now();
  for (auto& [key, list] : sessions) {
    const std::vector<const RoundRecord*> view(list.begin(), list.end());
    for (size_t i = 0; i < list.size(); ++i) {
      RoundRecord& r = *list[i];
      if (!Judgeable(r)) continue;
      const auto r0 = Env::Default().Now();
      JudgeAgainstReference(o, MessagesForRound(view, i), &r);
      const auto now = Env::Default().Now();
      r.verify_s = std::chrono::duration<double>(now - r0).count();
      progress.tokens_computed += r.prompt_tokens + r.completion_tokens;
      ++progress.rounds_done;
      progress.elapsed_s = std::chrono::duration<double>(now - t0).count();
      if (on_progress) on_progress(progress);
    }
  }
  return Status::Ok();
}

}  // namespace tandem
