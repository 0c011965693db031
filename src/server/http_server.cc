#include "server/http_server.h"

#include "common/env.h"
#include "common/sampling_params.h"
#include "server/stream_frames.h"

#include <algorithm>
#include <ctime>

#include <nlohmann/json.hpp>

namespace tandem {
namespace {

void SendError(HttpReply& reply, const ApiError& e) {
  HttpHeaders h;
  if (e.http_status == 429 || e.http_status == 503) h.emplace_back("Retry-After", "1");
  reply.Send(e.http_status, "application/json", ErrorJson(e), std::move(h));
}

int64_t UnixNow() { return int64_t(Env::Default().WallSeconds()); }

}  // namespace


// One request's answer in progress. The engine's pushes wake it (Notify);
// its Pump runs on its own serial of the worker pool and turns the choices'
// events into SSE frames, or into one JSON answer at the end. The server
// holds it (live_) until it is done; the handles' listeners hold it weakly.
class HttpServer::Exchange : public std::enable_shared_from_this<Exchange> {
 public:
  Exchange(HttpServer& server, ParsedRequest parsed, std::shared_ptr<HttpReply> reply)
      : server_(server), p_(std::move(parsed)), reply_(std::move(reply)), serial_(server.core_->NewSerial()) {}

  // Sets up the choices around their handles (before Track): the first
  // choice's alone (the others are submitted once its prompt is computed),
  // or every choice's that is not done already (a resumed stream).
  void Prepare(std::vector<std::shared_ptr<RequestHandle>> handles) {
    choices_.resize(size_t(p_.n));
    const uint64_t id = p_.resume ? p_.resume->id : handles[0]->id();
    const int64_t created = p_.resume ? p_.resume->created : UnixNow();
    const Tokenizer& tok = *server_.info_.tokenizer;
    for (size_t i = 0; i < choices_.size(); ++i) {
      StreamChoice& c = choices_[i];
      c.meta = ResponseMeta{p_.model, id, created, p_.include_usage};
      c.meta.choice = int(i);
      if (p_.chat && p_.tools_enabled) {
        c.tools = std::make_unique<ToolCallStreamer>(id, p_.tool_format, p_.parallel_tool_calls ? 1 << 30 : 1);
      }
      if (i < handles.size()) c.handle = std::move(handles[i]);
      if (!p_.resume) continue;
      const ParsedRequest::Resume::Choice& r = p_.resume->choices[i];
      c.started = r.started;
      if (r.started && p_.echo) {  // the echo went out: its bytes come before the answer's
        for (int32_t t : p_.spec.prompt) c.text_offset += int64_t(tok.TokenBytes(t).size());
      }
      if (r.done) {
        c.done = true;
        c.usage = Usage{int64_t(p_.spec.prompt.size()), int64_t(r.tokens.size()), 0};
      }
    }
    others_submitted_ = p_.resume.has_value() || choices_.size() == 1;
  }

  // Starts the answer (after Track): on the serial, before any event is turned into frames.
  void Start() {
    server_.core_->Post(serial_, [self = shared_from_this()] {
      self->StartOnSerial();
      self->Pump();
    });
  }

  // Any thread.
  void Notify() {
    if (queued_.exchange(true)) return;
    server_.core_->Post(serial_, [self = shared_from_this()] {
      self->queued_ = false;
      self->Pump();
    });
  }
  // Every choice, and any submitted later (n > 1): none runs for nobody.
  void CancelAll() {
    std::vector<std::shared_ptr<RequestHandle>> all;
    {
      MutexLock lock(handles_mu_);
      cancelled_ = true;
      all = handles_;
    }
    for (const auto& h : all) h->Cancel();  // a no-op for a finished request
  }
  std::vector<std::shared_ptr<RequestHandle>> handles() {
    MutexLock lock(handles_mu_);
    return handles_;
  }
  void AddHandle(std::shared_ptr<RequestHandle> h) {
    MutexLock lock(handles_mu_);
    if (cancelled_) h->Cancel();
    handles_.push_back(std::move(h));
  }

 private:
  void StartOnSerial() {
    started_ = true;
    if (p_.stream) {
      reply_->StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
      std::string head;
      if (p_.trace) {
        StreamTrace t;
        t.id = choices_[0].meta.request_id;
        t.created = choices_[0].meta.created;
        head = StreamTraceSse(t);
      }
      if (p_.chat) {
        StreamTrace opened;
        for (StreamChoice& c : choices_) {
          if (c.started) continue;  // a resumed stream's that went out already
          c.started = true;
          ChatDelta d;
          d.role = true;
          d.content = "";
          head += ChatChunkSse(c.meta, d);
          opened.choices.push_back({c.meta.choice, {}, /*opened=*/true, /*finished=*/false});
        }
        if (p_.trace && !opened.choices.empty()) head += StreamTraceSse(opened);
      }
      if (!head.empty()) reply_->Write(std::move(head));
    }
    std::weak_ptr<Exchange> weak = weak_from_this();
    reply_->OnHangUp([weak] {
      if (auto e = weak.lock()) e->CancelAll();
    });
  }

  void Pump() {
    if (done_ || !started_) return;
    if (!others_submitted_ && !SubmitOthers()) return;
    for (StreamChoice& c : choices_) {
      StreamEvent ev;
      while (!done_ && c.handle && !c.done && c.handle->Next(&ev, std::chrono::milliseconds(0))) {
        if (p_.stream) {
          Frame(c, ev);
        } else {
          Collect(c, ev);
        }
      }
    }
    if (done_) return;
    if (std::all_of(choices_.begin(), choices_.end(), [](const StreamChoice& c) { return c.done; })) Complete();
  }

  // The other choices go in once the first one's prompt is computed (its
  // first event), so they find its pages in the prefix cache.
  bool SubmitOthers() {
    if (!choices_[0].handle->WaitForEvent(std::chrono::milliseconds(0)) && !choices_[0].done) return true;
    others_submitted_ = true;
    if (reply_->gone()) {  // hung up before the first choice's prompt was done: the others never start
      for (size_t i = 1; i < choices_.size(); ++i) choices_[i].done = true;
      CancelAll();
      return true;
    }
    for (size_t i = 1; i < choices_.size(); ++i) {
      RequestSpec spec = p_.spec;
      spec.sampling.seed = ChoiceSeed(p_.spec.sampling.seed, int(i));
      auto h = server_.engine_.Submit(std::move(spec));
      if (!h.ok()) {
        Fail(ApiErrorFromStatus(h.status()));
        return false;
      }
      choices_[i].handle = *h;
      if (!server_.Track(shared_from_this(), {*h})) {
        Fail(ApiErrorFromStatus(Unavailable("the server is shutting down")));
        return false;
      }
    }
    return true;
  }

  void Frame(StreamChoice& c, StreamEvent& ev) {
    if (ev.replay) return Replay(c, ev);
    // The text an answer's end flushes (no tokens of its own) comes right
    // before its finish: both go in one write, so a stream is never cut
    // between them (a moved stream could not tell the flush happened).
    if (ev.kind == StreamEvent::Kind::kText && ev.tokens.empty() && !ev.text.empty()) {
      c.tail = std::move(ev);
      return;
    }
    c.untraced.insert(c.untraced.end(), ev.tokens.begin(), ev.tokens.end());
    const bool was_started = c.started;
    bool failed = false;
    std::string frame;
    if (c.tail) {
      frame = ChoiceFrames(p_, *server_.info_.tokenizer, c, *c.tail, &failed);
      c.tail.reset();
    }
    frame += ChoiceFrames(p_, *server_.info_.tokenizer, c, ev, &failed);
    if (!frame.empty()) c.started = true;  // its first frame (a completion without echo has no opening of its own)
    if (p_.trace && !frame.empty()) {
      StreamTrace t;
      if (failed) {
        t.error_status = ApiErrorFromStatus(ev.error).http_status;
      } else {
        t.choices.push_back({c.meta.choice, std::move(c.untraced), !was_started, c.done});
        c.untraced.clear();
      }
      frame += StreamTraceSse(t);
    }
    if (failed) {
      CancelAll();
      reply_->Write(std::move(frame));
      reply_->End();
      return Finish();
    }
    if (!frame.empty() && !reply_->Write(std::move(frame))) {
      // Gone, or too far behind: the answer cannot be whole, so it is cut off
      // (never a complete-looking stream with a hole) and the choices cancelled.
      reply_->Abort();
      CancelAll();
    }
  }

  // A resumed choice's delivered tokens: the state their frames left (the
  // tool-call streamer's, the logprobs' text offset), with nothing written.
  void Replay(StreamChoice& c, const StreamEvent& ev) {
    if (c.tools) c.tools->Push(ev.text);
    for (int32_t t : ev.tokens) c.text_offset += int64_t(server_.info_.tokenizer->TokenBytes(t).size());
  }

  void Collect(StreamChoice& c, StreamEvent& ev) {
    if (!c.started) {
      c.started = true;
      c.text = p_.echo_text;  // empty without echo
    }
    if (ev.kind == StreamEvent::Kind::kText) {
      c.logprobs.insert(c.logprobs.end(), ev.prompt_logprobs.begin(), ev.prompt_logprobs.end());  // echo: first
      c.text += ev.text;
      c.tokens.insert(c.tokens.end(), ev.tokens.begin(), ev.tokens.end());
      c.logprobs.insert(c.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
      return;
    }
    c.done = true;
    if (ev.kind == StreamEvent::Kind::kError) return Fail(ApiErrorFromStatus(ev.error));
    c.usage = Usage{ev.prompt_tokens, ev.completion_tokens, ev.cached_prompt_tokens};
    c.finish_reason = FinishReasonName(ev.finish);
  }

  void Complete() {
    if (p_.stream) {
      std::string frame;
      if (p_.include_usage) {
        Usage total = choices_[0].usage;
        for (size_t i = 1; i < choices_.size(); ++i) total.completion_tokens += choices_[i].usage.completion_tokens;
        frame += UsageChunkSse(choices_[0].meta, p_.chat, total);
      }
      frame += DoneSse();
      if (p_.trace) frame += StreamTraceSse({});
      reply_->Write(std::move(frame));
      reply_->End();
      return Finish();
    }
    std::vector<std::string> responses;
    Usage total;
    for (size_t i = 0; i < choices_.size(); ++i) {
      StreamChoice& c = choices_[i];
      ResponseMeta meta{p_.model, choices_[0].meta.request_id, UnixNow(), false};
      meta.choice = int(i);
      total.prompt_tokens = c.usage.prompt_tokens;
      total.cached_tokens = i == 0 ? c.usage.cached_tokens : total.cached_tokens;
      total.completion_tokens += c.usage.completion_tokens;
      const std::vector<int32_t>* ids = p_.return_token_ids ? &c.tokens : nullptr;
      const LogprobsOut lp{server_.info_.tokenizer, c.logprobs, 0};
      const LogprobsOut* lpp = p_.spec.logprobs >= 0 ? &lp : nullptr;
      if (p_.chat) {
        ParsedOutput out =
            p_.tools_enabled ? ParseToolCalls(c.text, meta.request_id, p_.tool_format) : ParsedOutput{c.text, {}};
        if (!p_.parallel_tool_calls && out.tool_calls.size() > 1) out.tool_calls.resize(1);
        responses.push_back(ChatCompletionJson(meta, out, c.finish_reason, c.usage, ids, lpp));
      } else {
        responses.push_back(CompletionJson(meta, c.text, c.finish_reason, c.usage, ids, lpp));
      }
    }
    reply_->Send(200, "application/json", responses.size() == 1 ? responses[0] : MergeChoices(responses, total));
    Finish();
  }

  void Fail(const ApiError& e) {
    CancelAll();
    if (p_.stream) {
      std::string frame = "data: " + ErrorJson(e) + "\n\n";
      if (p_.trace) {
        StreamTrace t;
        t.error_status = e.http_status;
        frame += StreamTraceSse(t);
      }
      reply_->Write(std::move(frame));
      reply_->End();
    } else {
      SendError(*reply_, e);
    }
    Finish();
  }

  void Finish() {
    done_ = true;
    for (const auto& h : handles()) h->SetListener(nullptr);
    server_.Forget(this);  // may destroy this exchange once the caller's reference goes
  }

  HttpServer& server_;
  const ParsedRequest p_;
  const std::shared_ptr<HttpReply> reply_;
  const std::shared_ptr<HttpCore::Serial> serial_;
  std::vector<StreamChoice> choices_;  // on the serial only
  bool started_ = false, done_ = false;  // on the serial only
  bool others_submitted_ = false;        // n > 1: the choices after the first are submitted (on the serial)
  std::atomic<bool> queued_{false};
  Mutex handles_mu_;
  std::vector<std::shared_ptr<RequestHandle>> handles_ GUARDED_BY(handles_mu_);
  bool cancelled_ GUARDED_BY(handles_mu_) = false;  // later handles are cancelled as they come
};

HttpServer::HttpServer(Engine& engine, const Model& model, ServerOptions options)
    : engine_(engine), options_(std::move(options)) {
  info_.id = options_.model_id.empty() ? model.config().name : options_.model_id;
  info_.context_length = engine.context_tokens();
  info_.tokenizer = &model.tokenizer();
  info_.chat_format = &model.chat_format();
  info_.created = UnixNow();
  info_.attention = engine.cache_spec().attention;
  info_.numerics = &engine.numerics();
  RequestSpec with_logprobs;  // whether the engine's role serves logprobs
  with_logprobs.logprobs = 0;
  info_.logprobs = engine.CheckRole(with_logprobs).ok();
}

HttpServer::~HttpServer() { Stop(std::chrono::milliseconds(0)); }

Status HttpServer::Start() {
  core_ = std::make_unique<HttpCore>(options_.http, options_.access);
  // ok (200); degraded (200, with the reason: serving, not as configured);
  // draining (503: finishing what it holds, taking nothing new); unavailable (503).
  core_->Route("GET", "/health", [this](HttpRequest&, std::shared_ptr<HttpReply> reply) {
    nlohmann::json health;
    const bool healthy = engine_.Stats().healthy;
    if (engine_.draining()) {
      health["status"] = "draining";
    } else if (std::string stall = engine_.StallNote(); !healthy && !stall.empty()) {
      health["status"] = "stalled";
      health["reason"] = std::move(stall);
    } else if (!healthy) {
      health["status"] = "unavailable";
    } else if (std::string note = engine_.HealthNote(); !note.empty()) {
      health["status"] = "degraded";
      health["reason"] = std::move(note);
    } else {
      health["status"] = "ok";
    }
    if (options_.discovery_health) health["discovery"] = options_.discovery_health();
    reply->Send(healthy ? 200 : 503, "application/json", health.dump());
  }, /*quick=*/true);
  if (options_.on_drain) {
    core_->Route("POST", "/admin/drain", [this](HttpRequest&, std::shared_ptr<HttpReply> reply) {
      // The answer first: it is queued on the connection before the drain
      // can shut it (a shut waits for a queued answer), so the operator
      // hears 202 even when the drain is over at once.
      reply->Send(202, "application/json", "{\"status\":\"draining\"}");
      options_.on_drain();
    }, /*quick=*/true);
  }
  core_->Route("GET", "/metrics", [this](HttpRequest&, std::shared_ptr<HttpReply> reply) {
    reply->Send(200, "text/plain; version=0.0.4",
                engine_.metrics().Text() + core_->MetricsText("tandem_") +
                    (options_.discovery_metrics ? options_.discovery_metrics() : std::string()));
  }, /*quick=*/true);
  core_->Route("GET", "/v1/models", [this](HttpRequest&, std::shared_ptr<HttpReply> reply) {
    reply->Send(200, "application/json", ModelsJson(info_));
  }, /*quick=*/true);
  core_->Route("POST", "/v1/chat/completions", [this](HttpRequest& req, std::shared_ptr<HttpReply> reply) {
    HandleCompletion(req, reply, true);
  });
  core_->Route("POST", "/v1/completions", [this](HttpRequest& req, std::shared_ptr<HttpReply> reply) {
    HandleCompletion(req, reply, false);
  });
  return core_->Start(options_.host, options_.port);
}

void HttpServer::Stop(std::chrono::milliseconds grace) {
  if (!core_) return;
  std::vector<std::shared_ptr<Exchange>> left;
  {
    UniqueLock lock(mu_);
    if (stopping_) return;
    idle_.wait_for(lock.native(), grace, [&]() REQUIRES(mu_) { return live_.empty(); });
    stopping_ = true;
    for (auto& [p, e] : live_) left.push_back(e);
  }
  // No listener may post once the pools stop: silence them, then cancel.
  for (auto& e : left) {
    for (const auto& h : e->handles()) h->SetListener(nullptr);
    e->CancelAll();
  }
  core_->Stop();
  left.clear();
  {
    MutexLock lock(mu_);
    live_.clear();
  }
  core_.reset();
}

bool HttpServer::Track(const std::shared_ptr<Exchange>& e, const std::vector<std::shared_ptr<RequestHandle>>& handles) {
  MutexLock lock(mu_);
  if (stopping_) {
    for (const auto& h : handles) h->Cancel();
    return false;
  }
  live_[e.get()] = e;
  std::weak_ptr<Exchange> weak = e;
  for (const auto& h : handles) {
    e->AddHandle(h);
    h->SetListener([weak] {
      if (auto x = weak.lock()) x->Notify();
    });
  }
  return true;
}

void HttpServer::Forget(Exchange* e) {
  std::shared_ptr<Exchange> keep;  // destroyed after the lock is released
  {
    MutexLock lock(mu_);
    auto it = live_.find(e);
    if (it == live_.end()) return;
    keep = std::move(it->second);
    live_.erase(it);
  }
  idle_.notify_all();
}

void HttpServer::HandleCompletion(HttpRequest& req, const std::shared_ptr<HttpReply>& reply, bool chat) {
  ParseResult parsed = chat ? ParseChatCompletionRequest(req.body, info_) : ParseCompletionRequest(req.body, info_);
  if (auto* e = std::get_if<ApiError>(&parsed)) return SendError(*reply, *e);
  ParsedRequest& p = std::get<ParsedRequest>(parsed);
  // The tenant whose cached prefixes this request may find (invariant 10).
  p.spec.cache_salt = CacheSaltFor(req.Header("Authorization"), p.cache_salt);
  if (!p.has_seed) p.spec.sampling.seed = FreshSeed();
  // Every choice must be done by one deadline: the request's timeout from now.
  if (p.n > 1) p.spec.deadline = engine_.options().env->Now() + engine_.options().request_timeout;
  std::vector<std::shared_ptr<RequestHandle>> handles;
  if (!p.resume) {
    auto first = engine_.Submit(p.spec);
    if (!first.ok()) return SendError(*reply, ApiErrorFromStatus(first.status()));
    handles.push_back(*first);
  } else {
    // A moved stream: every choice not done goes on from its delivered tokens.
    for (int i = 0; i < p.n; ++i) {
      const ParsedRequest::Resume::Choice& r = p.resume->choices[size_t(i)];
      if (r.done) {
        handles.push_back(nullptr);
        continue;
      }
      RequestSpec spec = p.spec;
      spec.sampling.seed = ChoiceSeed(p.spec.sampling.seed, i);
      spec.resumed = r.tokens;
      spec.prompt_logprobs = p.spec.prompt_logprobs && !r.started;  // the echo went out with its logprobs
      auto h = engine_.Submit(std::move(spec));
      if (!h.ok()) {
        for (const auto& earlier : handles) {
          if (earlier) earlier->Cancel();
        }
        return SendError(*reply, ApiErrorFromStatus(h.status()));
      }
      handles.push_back(*h);
    }
  }
  std::vector<std::shared_ptr<RequestHandle>> tracked;
  for (const auto& h : handles) {
    if (h) tracked.push_back(h);
  }
  auto exchange = std::make_shared<Exchange>(*this, std::move(p), reply);
  exchange->Prepare(std::move(handles));
  if (!Track(exchange, tracked)) return SendError(*reply, ApiErrorFromStatus(Unavailable("the server is shutting down")));
  exchange->Start();
}

}  // namespace tandem
