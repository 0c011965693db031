#include "loadgen/verify.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "cache/page_pool.h"
#include "common/env.h"
#include "model/forward.h"
#include "model/numerics.h"
#include "runtime/generator.h"
#include "runtime/sampler.h"

namespace tandem {

using Json = nlohmann::json;

namespace {
// Prompt and output tokens of a round as the server counted them.
int64_t RoundTokens(const RoundRecord& r) {
  return r.prompt_tokens + std::max(int64_t(r.token_ids.size()), r.completion_tokens);
}
}  // namespace

ReferenceVerifier::ReferenceVerifier(const Model& model, const CacheSpec& spec, ThreadPool& threads,
                                     int64_t ctx_tokens, const std::string& model_id, bool exact,
                                     double near_tie_nats)
    : model_(model),
      spec_(spec),
      threads_(threads),
      ctx_tokens_(ctx_tokens),
      exact_(exact),
      near_tie_nats_(near_tie_nats) {
  info_.id = model_id.empty() ? model.config().name : model_id;
  info_.context_length = ctx_tokens;
  info_.tokenizer = &model.tokenizer();
  info_.chat_format = &model.chat_format();
  info_.attention = spec.attention;
}

Status ReferenceSession::Reserve(const CacheSpec& spec, int n_layers, int64_t tokens) {
  if (pool_ && capacity_tokens() >= tokens) return Status::Ok();
  // Growing starts the session over: at least double, so that happens a few times at most.
  if (pool_) tokens = std::max(tokens, 2 * capacity_tokens());
  Reset();
  pool_ = std::make_unique<PagePool>(spec.registry, n_layers, (tokens + kPageTokens - 1) / kPageTokens);
  auto pages = pool_->Allocate(pool_->free_pages());
  if (!pages.ok()) return pages.status();
  pages_ = std::move(*pages);
  return Status::Ok();
}

void ReferenceSession::Reset() {
  if (pool_) pool_->Release(pages_);
  pages_.clear();
  tokens_.clear();
  pool_.reset();
}

int64_t ReferenceVerifier::Judge(const Json& messages, RoundRecord* round, ReferenceSession* session) {
  Json body = round->request;
  body["messages"] = messages;
  body["stream"] = false;
  const ParseResult parsed = ParseChatCompletionRequest(body.dump(), info_);
  if (const auto* e = std::get_if<ApiError>(&parsed)) {
    round->outcome = kError;
    round->verify_note = "the reference cannot replay this request: " + e->message;
    return 0;
  }
  const ParsedRequest& req = std::get<ParsedRequest>(parsed);
  if (!req.spec.sampling.constraint.empty()) {
    round->outcome = kError;
    round->verify_note = "the reference does not replay structured outputs (response_format or a forced tool call)";
    return 0;
  }
  if (int64_t(req.spec.prompt.size()) != round->prompt_tokens && round->prompt_tokens > 0) {
    // The server rendered different prompt tokens: judged anyway, but said.
    round->verify_note = "prompt is " + std::to_string(req.spec.prompt.size()) + " tokens here, " +
                         std::to_string(round->prompt_tokens) + " at the server; ";
  } else {
    round->verify_note.clear();
  }
  round->first_mismatch = -1;
  int64_t computed = 0;
  Verdict v;
  if (round->has_token_ids) {
    ReferenceSession scratch;
    v = JudgeTokens(req, round, session ? *session : scratch, &computed);
  } else {
    v = JudgeText(req, round, &computed);
  }
  if (v == Verdict::kSame && round->has_token_ids) v = CheckTextMatchesIds(req, round);
  if (v == Verdict::kDrift && round->has_token_ids) {
    // The ids must still spell the text (a decoder's bug is no numerics' drift).
    std::string note = round->verify_note;
    if (CheckTextMatchesIds(req, round) == Verdict::kDiffers) v = Verdict::kDiffers;
    else round->verify_note = note;
  }
  round->outcome = v == Verdict::kSame      ? kOk
                   : v == Verdict::kDrift   ? kDrift
                   : v == Verdict::kDiffers ? kCorrupt
                   : v == Verdict::kUnjudged ? kUnverified
                                             : kError;
  return computed;
}

ReferenceVerifier::Verdict ReferenceVerifier::CheckTextMatchesIds(const ParsedRequest& req, RoundRecord* round) {
  const std::vector<int32_t>& ids = round->token_ids;
  if (round->completion_tokens > 0 && round->completion_tokens != int64_t(ids.size())) {
    round->first_mismatch = std::min<int64_t>(round->completion_tokens, int64_t(ids.size()));
    round->verify_note += "; but usage says " + std::to_string(round->completion_tokens) + " tokens and " +
                          std::to_string(ids.size()) + " ids arrived";
    return Verdict::kDiffers;
  }
  if (!req.spec.stop.empty()) return Verdict::kSame;  // stop strings cut the text; ids are the judge
  StreamDecoder decoder(model_.tokenizer());
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    text += decoder.Push(ids[i]);
    if (round->text.compare(0, text.size(), text) != 0) {
      round->first_mismatch = int64_t(i);
      round->verify_note += "; but the streamed text differs from its token ids at token " + std::to_string(i);
      return Verdict::kDiffers;
    }
  }
  text += decoder.Flush();
  if (text != round->text) {
    round->first_mismatch = int64_t(ids.size());
    round->verify_note += "; but the streamed text is not what its token ids spell";
    return Verdict::kDiffers;
  }
  return Verdict::kSame;
}

ReferenceVerifier::Verdict ReferenceVerifier::JudgeTokens(const ParsedRequest& req, RoundRecord* round,
                                                          ReferenceSession& session, int64_t* computed) {
  const std::vector<int32_t>& prompt = req.spec.prompt;
  const std::vector<int32_t>& served = round->token_ids;
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), served.begin(), served.end());
  const int64_t p = int64_t(prompt.size()), total = int64_t(seq.size());
  if (total + 1 > ctx_tokens_) {
    round->verify_note += "too long to replay (" + std::to_string(total) + " tokens)";
    return Verdict::kNotReplayed;
  }
  // A served id outside the vocabulary is the first wrong token (the forward
  // pass would refuse the whole sequence).
  for (size_t i = 0; i < served.size(); ++i) {
    if (served[i] < 0 || served[i] >= model_.config().vocab_size) {
      round->first_mismatch = int64_t(i);
      round->verify_note += "token " + std::to_string(i) + ": server " + std::to_string(served[i]) +
                            " is not a token of this vocabulary";
      return Verdict::kDiffers;
    }
  }
  if (Status st = session.Reserve(spec_, int(model_.config().n_layers), total + 1); !st.ok()) {
    round->verify_note += "no pages: " + st.ToString();
    return Verdict::kNotReplayed;
  }
  // Reuse the cached rows of the longest common prefix, but recompute from
  // p - 1 at the latest: that row's logits draw output token 0.
  const std::vector<int32_t>& cached = session.tokens();
  int64_t start = 0;
  const int64_t common = std::min<int64_t>(int64_t(cached.size()), p - 1);
  while (start < common && cached[size_t(start)] == seq[size_t(start)]) ++start;
  session.Truncate(start);
  ForwardPass forward(model_, spec_, threads_);
  Sampler sampler;
  const int64_t vocab = model_.config().vocab_size;
  const Tokenizer& tok = model_.tokenizer();
  // Output position i is drawn from the logits after token p - 1 + i. Chunks
  // up to p - 1 need no logits; from there on every row is checked.
  constexpr int64_t kChunk = 256;
  std::vector<float> logits;
  auto run = [&](int64_t from, int64_t to, bool all) -> Status {
    SequenceChunk c{std::span<const int32_t>(seq.data() + from, size_t(to - from)), from, session.pages(), all};
    logits.clear();
    Status st = forward.Run({&c, 1}, session.pool(), &logits);
    if (st.ok()) {
      session.Extend(seq, to);
      *computed += to - from;
    } else {
      session.Truncate(0);  // nothing past a failed pass is trusted
    }
    return st;
  };
  for (; start < p - 1; start = std::min(start + kChunk, p - 1)) {
    if (Status st = run(start, std::min(start + kChunk, p - 1), false); !st.ok()) {
      round->verify_note += st.ToString();
      return Verdict::kNotReplayed;
    }
  }
  int64_t checked = 0;  // output positions judged so far
  const int64_t n_out = int64_t(served.size());
  // Across numerics identities: each differing token is judged by its margin,
  // the reference's logit for its own choice minus the served token's (the
  // softmax's normalizer cancels, so this is the difference of their logprobs).
  // Margins are taken on the model's own logits: only where the draw is a
  // plain argmax of them (greedy, no penalties, no logit_bias).
  const SamplingParams& sp = req.spec.sampling;
  const bool greedy = sp.temperature <= 0.0f && sp.logit_bias.empty() && sp.repetition_penalty == 1.0f &&
                      sp.frequency_penalty == 0.0f && sp.presence_penalty == 0.0f;
  struct {
    int64_t count = 0, first = -1;
    double first_margin = 0, largest = 0;
    std::string first_note;
  } drift;
  auto margin_of = [](std::span<const float> l, int32_t want, int32_t taken) {
    return double(l[size_t(want)]) - double(l[size_t(taken)]);
  };
  // True (and noted) when the differing token at output index i is a near-tie.
  auto drifts = [&](std::span<const float> l, int64_t i, int32_t want, int32_t taken, const std::string& what) {
    if (exact_ || !greedy || taken < 0) return false;
    const double m = margin_of(l, want, taken);
    if (!(m <= near_tie_nats_)) return false;  // NaN logits are never a near-tie
    if (drift.count++ == 0) {
      drift.first = i;
      drift.first_margin = m;
      drift.first_note = what;
    }
    drift.largest = std::max(drift.largest, m);
    return true;
  };
  auto margin_note = [&](std::span<const float> l, int32_t want, int32_t taken) {
    if (exact_ || taken < 0) return std::string();
    if (!greedy) {
      return std::string(" (sampled or adjusted by penalties or logit_bias: across numerics identities such a draw "
                         "is not judged by margins)");
    }
    char m[64];
    std::snprintf(m, sizeof m, " (%.4g nats below the reference's choice: more than a near-tie of %.4g)",
                  margin_of(l, want, taken), near_tie_nats_);
    return std::string(m);
  };
  const bool expect_stop =
      round->finish_reason == "stop" && !req.spec.ignore_eos && req.spec.stop.empty() && n_out < req.spec.max_tokens;
  for (; start < total; start += kChunk) {
    const int64_t end = std::min(start + kChunk, total);
    if (Status st = run(start, end, true); !st.ok()) {
      round->verify_note += st.ToString();
      return Verdict::kNotReplayed;
    }
    for (int64_t row = 0; row < end - start; ++row) {
      const int64_t i = start + row - (p - 1);  // output index this row predicts
      std::span<const float> l(logits.data() + row * vocab, size_t(vocab));
      const int64_t pos = p + i;
      const int32_t want = sampler.Sample(l, req.spec.sampling, std::span<const int32_t>(seq.data(), size_t(pos)), pos, p);
      if (i < n_out) {
        const bool stops_here = !req.spec.ignore_eos && tok.IsEndOfGeneration(want);
        if (want != served[size_t(i)] || stops_here) {
          const std::string what = "token " + std::to_string(i) + ": server " + std::to_string(served[size_t(i)]) +
                                   ", reference " + std::to_string(want) + (stops_here ? " (end of generation)" : "");
          // Past an end of generation the reference took itself, no margin excuses going on.
          if (want != served[size_t(i)] && drifts(l, i, want, served[size_t(i)], what)) {
            ++checked;
            continue;
          }
          if (!exact_ && !greedy && want != served[size_t(i)]) {
            round->first_mismatch = i;
            round->verify_note += what + margin_note(l, want, served[size_t(i)]);
            return Verdict::kUnjudged;
          }
          round->first_mismatch = i;
          round->verify_note += what + margin_note(l, want, served[size_t(i)]);
          return Verdict::kDiffers;
        }
        ++checked;
      } else if (expect_stop && !tok.IsEndOfGeneration(want)) {
        const std::string what = "the server stopped at token " + std::to_string(i) +
                                 "; the reference goes on with " + std::to_string(want);
        if (drifts(l, i, want, tok.eos_id(), what)) continue;
        round->first_mismatch = i;
        round->verify_note += "the server stopped at token " + std::to_string(i) + "; the reference goes on with " +
                              std::to_string(want);
        return Verdict::kDiffers;
      }
    }
  }
  // "length" before max_tokens is only right where the context ended.
  if (round->finish_reason == "length" && n_out < req.spec.max_tokens && total < ctx_tokens_ - 1) {
    round->first_mismatch = n_out;
    round->verify_note += "the server stopped after " + std::to_string(n_out) + " of " +
                          std::to_string(req.spec.max_tokens) + " tokens with room left";
    return Verdict::kDiffers;
  }
  if (drift.count > 0) {
    char m[160];
    std::snprintf(m, sizeof m, " (%.4g nats; largest %.4g)", drift.first_margin, drift.largest);
    round->first_mismatch = drift.first;
    round->verify_note += "drift across numerics identities: " + std::to_string(drift.count) + " of " +
                          std::to_string(checked) + " tokens differ, each a near-tie of the reference's choice; first " +
                          drift.first_note + m;
    return Verdict::kDrift;
  }
  round->verify_note += std::to_string(checked) + " tokens identical";
  return Verdict::kSame;
}

ReferenceVerifier::Verdict ReferenceVerifier::JudgeText(const ParsedRequest& req, RoundRecord* round,
                                                        int64_t* computed) {
  Generator gen(model_, spec_, threads_, ctx_tokens_);
  GenerateOptions opt;
  opt.sampling = req.spec.sampling;
  opt.max_tokens = req.spec.max_tokens;
  opt.stop_strings = req.spec.stop;
  opt.ignore_eos = req.spec.ignore_eos;
  auto result = gen.Run(req.spec.prompt, opt, nullptr);
  if (!result.ok()) {
    round->verify_note += "the reference failed: " + result.status().ToString();
    return Verdict::kNotReplayed;
  }
  *computed += int64_t(req.spec.prompt.size() + result->tokens.size());
  if (result->text == round->text) {
    round->verify_note += "text identical (" + std::to_string(result->tokens.size()) + " tokens)";
    return Verdict::kSame;
  }
  // The first reference token whose text no longer agrees with the served text.
  StreamDecoder decoder(model_.tokenizer());
  std::string prefix;
  int64_t i = 0;
  for (; i < int64_t(result->tokens.size()); ++i) {
    prefix += decoder.Push(result->tokens[size_t(i)]);
    if (round->text.compare(0, prefix.size(), prefix) != 0) break;
  }
  round->first_mismatch = i;
  round->verify_note += "text differs from reference token " + std::to_string(i);
  if (!exact_) {
    // Without the served ids there is no position to take the margin at.
    round->verify_note += ": across numerics identities, a round without token ids is not judged";
    return Verdict::kUnjudged;
  }
  return Verdict::kDiffers;
}

StatusOr<AttentionOptions> AttentionFromHeader(const Json& a, const AttentionOptions& fallback) {
  if (a.is_null()) return fallback;
  try {
    // Transcripts from before K/V dtypes existed were all f32.
    return ParseAttentionOptions(a.at("kind").get<std::string>(), a.at("index_k_dtype").get<std::string>(),
                                 a.at("top_k").get<int64_t>(), a.value("kv_dtype", std::string("f32")));
  } catch (const Json::exception& e) {
    return InvalidArgument(std::string("bad server_attention in the transcript header: ") + e.what());
  }
}

StatusOr<SessionRounds> GroupSessions(std::vector<RoundRecord>* rounds) {
  SessionRounds sessions;
  for (RoundRecord& r : *rounds) sessions[{r.point, r.session}].push_back(&r);
  for (auto& [key, list] : sessions) {
    std::sort(list.begin(), list.end(), [](const RoundRecord* a, const RoundRecord* b) { return a->round < b->round; });
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i]->round != int(i)) {
        return InvalidArgument("session " + std::to_string(key.second) + " of point " + std::to_string(key.first) +
                               " is missing round " + std::to_string(i));
      }
    }
  }
  return sessions;
}

Status VerifyRounds(const Model& model, const AttentionOptions& attention, std::vector<RoundRecord>* rounds,
                    const VerifyOptions& options) {
  TANDEM_ASSIGN_OR_RETURN(CacheSpec spec, MakeCacheSpec(model.config(), attention));
  TANDEM_ASSIGN_OR_RETURN(SessionRounds sessions, GroupSessions(rounds));
  int64_t longest = 0;
  VerifyProgress progress;
  for (const RoundRecord& r : *rounds) {
    longest = std::max(longest, RoundTokens(r));
    progress.rounds_total += Judgeable(r);
  }
  // The server's context when known (the reference must stop where it did);
  // else room for the longest round and never less than the model's context.
  const int64_t ctx = options.server_context > 0
                          ? options.server_context
                          : std::max<int64_t>(model.config().context_length, longest + kPageTokens);
  ThreadPool pool(std::max(1, options.threads));
  ReferenceVerifier verifier(model, spec, pool, ctx, options.model_id, options.exact, options.near_tie_nats);
  const auto t0 = Env::Default().Now();
  for (auto& [key, list] : sessions) {
    int64_t session_longest = 0;
    for (const RoundRecord* r : list) session_longest = std::max(session_longest, RoundTokens(*r));
    // Sized once for the session's longest round (plus room for a rendering
    // that differs from the server's by a few tokens), so no round starts over.
    ReferenceSession session;
    if (!options.from_scratch && list[0]->has_token_ids) {
      (void)session.Reserve(spec, int(model.config().n_layers), std::min(ctx, session_longest + 2 * kPageTokens));
    }
    std::vector<const RoundRecord*> view(list.begin(), list.end());
    for (size_t i = 0; i < list.size(); ++i) {
      RoundRecord& r = *list[i];
      if (!Judgeable(r)) continue;
      const auto r0 = Env::Default().Now();
      progress.tokens_computed += verifier.Judge(MessagesForRound(view, i), &r, options.from_scratch ? nullptr : &session);
      const auto now = Env::Default().Now();
      r.verify_s = std::chrono::duration<double>(now - r0).count();
      ++progress.rounds_done;
      progress.elapsed_s = std::chrono::duration<double>(now - t0).count();
      if (options.on_progress) options.on_progress(progress);
    }
  }
  return Status::Ok();
}

StatusOr<NumericsJudgement> JudgeNumerics(const Model& reference, const AttentionOptions& attention,
                                          const Json& server_numerics) {
  TANDEM_ASSIGN_OR_RETURN(CacheSpec spec, MakeCacheSpec(reference.config(), attention));
  const NumericsIdentity mine = ComputeNumericsIdentity(reference, spec);
  NumericsJudgement j;
  j.reference_id = mine.Id();
  if (server_numerics.is_null()) {
    j.note = "numerics: the server did not say its identity (an older build or another engine); the reference is " +
             j.reference_id + ": differing tokens are judged by the reference's log-probabilities (drift or corrupt)";
    return j;
  }
  auto theirs = NumericsIdentity::FromJson(server_numerics);
  if (!theirs.ok()) {
    // Another build's identity may have parts this one does not know: foreign, not an error.
    j.note = "numerics: the server's identity is not one this build can read (" + theirs.status().message() +
             "); the reference is " + j.reference_id +
             ": differing tokens are judged by the reference's log-probabilities (drift or corrupt)";
    return j;
  }
  j.server_id = theirs->Id();
  j.exact = *theirs == mine;
  j.note = j.exact ? "numerics: server and reference are both " + j.reference_id + ": judged exactly, bit for bit"
                   : "numerics: server " + j.server_id + ", reference " + j.reference_id + " (they differ in " +
                         mine.Differences(*theirs) +
                         "): differing tokens are judged by the reference's log-probabilities (drift or corrupt)";
  return j;
}

std::function<void(const VerifyProgress&)> VerifyProgressPrinter(bool tty, double log_every_s) {
  auto last = std::make_shared<double>(0);
  return [tty, log_every_s, last](const VerifyProgress& p) {
    const bool finished = p.rounds_done == p.rounds_total;
    if (!tty && !finished && p.elapsed_s - *last < log_every_s) return;
    *last = p.elapsed_s;
    const double left =
        p.rounds_done == 0 ? 0 : p.elapsed_s / double(p.rounds_done) * double(p.rounds_total - p.rounds_done);
    std::fprintf(stderr, "%s  verified %zu/%zu rounds, %.0f tok/s, %.0f s elapsed, about %.0f s left%s",
                 tty ? "\r" : "", p.rounds_done, p.rounds_total,
                 p.elapsed_s > 0 ? double(p.tokens_computed) / p.elapsed_s : 0.0, p.elapsed_s, left,
                 tty ? (finished ? "\n" : "   ") : "\n");
  };
}

}  // namespace tandem
