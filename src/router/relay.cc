// One client request at the router, across the backends that serve it
// (router/router.h). Its attempts run one after another; each is an
// HttpClient call whose callbacks run one at a time on the client's I/O
// thread, and so does the timer of a move that waits for a backend. The
// client's hang-up (an I/O thread of the front door) only cancels.
//
// A stream is asked for its trace (server/openai_api.h, StreamTrace): each
// write of the backend ends with a trace event, and the relay forwards a
// write's data events to the client only with its trace, so what the client
// has is always exactly what the traces say — the tokens of each choice,
// whether its opening and final frames went. A stream that breaks off
// (connection lost, a 5xx error frame, an end without [DONE]) goes on at
// another backend from there (tandem_resume). A backend that answers no
// trace (not a tandem server) is relayed as it comes, and cut off if it breaks.
#include <strings.h>

#include <nlohmann/json.hpp>

#include "common/env.h"
#include "common/log.h"
#include "common/sampling_params.h"
#include "router/router.h"
#include "server/openai_api.h"
#include "server/request_body.h"

namespace tandem {

namespace {

// The body with `fields` ("\"k\":v,...") added as its last members: a JSON
// object's text, so the last '}' closes it, and a member given twice is the
// last one to a JSON parser (nlohmann's), so these win over the client's.
std::string WithFields(const std::string& body, const std::string& fields) {
  const size_t close = body.rfind('}');
  if (close == std::string::npos || fields.empty()) return body;
  const size_t open = body.find('{');
  const bool empty = body.find_first_not_of(" \t\r\n", open + 1) == close;
  return body.substr(0, close) + (empty ? "" : ",") + fields + body.substr(close);
}

bool IsDone(std::string_view event) { return event == "data: [DONE]"; }

// A client's field, when it has that type (the backend refuses what is malformed).
bool TrueField(const nlohmann::json& o, const char* key) {
  const auto it = o.find(key);
  return it != o.end() && it->is_boolean() && it->get<bool>();
}

}  // namespace

class Router::Relay : public std::enable_shared_from_this<Relay> {
 public:
  Relay(Router& router, HttpRequest& req, std::shared_ptr<HttpReply> reply, bool stream, const nlohmann::json& body)
      : router_(router),
        reply_(std::move(reply)),
        method_(req.method),
        target_(req.target),
        authorization_(req.Header("Authorization")),
        stream_(stream),
        conversation_(ConversationKey(body)),
        chain_(router.PromptChain(req.target, req.body, body, req.Header("Authorization"))),
        deadline_(router_.options_.env->Now() + std::chrono::milliseconds(int64_t(router.options_.request_timeout_s * 1000))) {
    body_ = std::move(req.body);
    // A client that traces its stream itself gets the traces.
    client_traced_ = stream_ && TrueField(body, "tandem_trace");
    if (method_ == "POST" && router_.options_.max_moves > 0) {
      // A move continues the answer the first backend began: the same seed.
      // (A field the client sent malformed is left for the backend to refuse.)
      std::string fields;
      if (!body.contains("seed") || body["seed"].is_null()) {
        fields = "\"seed\":" + std::to_string(FreshSeed());
      }
      if (stream_ && !body.contains("tandem_trace")) fields += std::string(fields.empty() ? "" : ",") + "\"tandem_trace\":true";
      body_ = WithFields(body_, fields);
      const auto n = body.find("n");
      const int64_t choices = n != body.end() && n->is_number_integer() ? n->get<int64_t>() : 1;
      choices_.resize(size_t(std::clamp<int64_t>(choices, 1, kMaxChoices)));
      // A client may resume a stream itself (after a router restart, say): a
      // move goes on from what it says it has; its first attempt sends the
      // client's own tandem_resume, which the backend checks.
      if (auto r = body.find("tandem_resume"); stream_ && r != body.end() && r->is_object()) TakeClientResume(*r);
    }
  }

  void Start() {
    std::weak_ptr<Relay> weak = weak_from_this();
    reply_->OnHangUp([weak] {
      if (auto self = weak.lock()) self->HangUp();
    });
    Attempt();
  }

 private:
  struct Choice {
    std::vector<int32_t> tokens;
    bool opened = false, finished = false;
  };

  // What the client says it has (its tandem_resume; the backend checks it).
  void TakeClientResume(const nlohmann::json& r) {
    const auto id = r.find("id");
    const auto choices = r.find("choices");
    if (id == r.end() || !id->is_number_unsigned() || choices == r.end() || !choices->is_array() ||
        choices->size() != choices_.size()) {
      return;  // malformed: the backend refuses it, and the router has nothing to move
    }
    id_ = id->get<uint64_t>();
    if (auto c = r.find("created"); c != r.end() && c->is_number_integer()) created_ = c->get<int64_t>();
    for (size_t i = 0; i < choices->size() && i < choices_.size(); ++i) {
      const nlohmann::json& c = (*choices)[i];
      if (!c.is_object()) continue;
      if (auto t = c.find("tokens"); t != c.end() && t->is_array()) {
        for (const auto& token : *t) {
          if (!token.is_number_unsigned() || token.get<uint64_t>() > uint64_t(INT32_MAX)) return id_.reset();
          choices_[i].tokens.push_back(int32_t(token.get<uint64_t>()));
        }
      }
      choices_[i].opened = TrueField(c, "started");
      choices_[i].finished = TrueField(c, "done");
    }
  }

  void HangUp() {
    std::shared_ptr<HttpCall> call;
    {
      MutexLock lock(mu_);
      hung_up_ = true;
      call = call_;
    }
    if (call) call->Cancel();  // the decode server sees the hang-up and cancels
  }

  // The next backend's turn; none healthy: waits (a move, up to move_wait).
  void Attempt() {
    if (reply_->gone()) return;
    // After a 500, only backends that have not run it (ran_): it never runs
    // twice on one backend (a request that breaks servers would break each
    // one it reaches again and again). With none left, even among those not
    // healthy now, the client hears what the last one said.
    const bool untried_only = !ran_.empty();
    Backend* b = router_.Pick(conversation_, untried_only ? ran_ : tried_, chain_, /*strictly_avoid=*/untried_only);
    const auto untried_left = [&] {
      for (const auto& backend : router_.Backends()) {
        if (backend->listed && std::find(ran_.begin(), ran_.end(), backend.get()) == ran_.end()) return true;
      }
      return false;
    };
    if (b == nullptr && untried_only && !untried_left()) {
      ++router_.not_moved_;
      if (last_answer_ && !reply_->started()) {
        return reply_->Send(last_answer_->status, last_answer_->content_type, std::move(last_answer_->body),
                            last_answer_->relayed);
      }
      return GiveUp(last_error_ + "; every healthy backend has run this request", 500);
    }
    if (b == nullptr) {
      if (attempts_ == 0) {  // a new request: at once (Retry-After), as before any move
        ++router_.unavailable_;
        return SendApiError(*reply_, 503, "no healthy decode backend", "server_error");
      }
      const auto now = router_.options_.env->Now();
      if (wait_since_ == std::chrono::steady_clock::time_point{}) wait_since_ = now;
      if (now - wait_since_ >= router_.options_.move_wait || now >= deadline_) {
        ++(attempts_ == 0 ? router_.unavailable_ : router_.moves_exhausted_);
        return GiveUp("no healthy decode backend within " + std::to_string(router_.options_.move_wait.count()) + " ms" +
                      (last_error_.empty() ? "" : " (the last one: " + last_error_ + ")"));
      }
      router_.client_->After(std::chrono::milliseconds(50), [self = shared_from_this()] { self->Attempt(); });
      return;
    }
    wait_since_ = {};
    if (attempts_ > 0) {
      ++router_.moves_;
      ++router_.moves_by_reason_[size_t(move_reason_)];
    }
    ++attempts_;
    backend_ = b;
    tried_.push_back(b);
    upstream_ = Upstream{};
    HttpClientRequest up;
    up.host = b->host;
    up.port = b->port;
    up.method = method_;
    up.target = target_;
    up.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - router_.options_.env->Now());
    if (up.timeout.count() < 1) up.timeout = std::chrono::milliseconds(1);
    if (method_ == "POST") up.headers.emplace_back("Content-Type", "application/json");
    if (!authorization_.empty()) up.headers.emplace_back("Authorization", authorization_);
    up.body = attempts_ > 1 && id_ ? WithFields(body_, "\"tandem_resume\":" + ResumeJson()) : body_;
    HttpClientEvents events;
    auto self = shared_from_this();
    events.on_head = [self](int status, const HttpHeaders& headers) { self->OnHead(status, headers); };
    events.on_data = [self](std::string data) { return self->OnData(std::move(data)); };
    events.on_done = [self, b](const std::string& error) {
      --*b->in_flight;
      self->OnDone(error);
    };
    uint64_t generation = 0;
    {
      MutexLock lock(mu_);
      generation = ++generation_;
    }
    last_heard_ = router_.options_.env->Now();
    silenced_ = false;
    auto call = router_.client_->Start(std::move(up), std::move(events));
    bool hung_up = false;
    {
      MutexLock lock(mu_);
      // A call that already ended (its OnDone ran, on the client's thread,
      // before this one got here) is not kept.
      if (generation_ == generation && ended_ != generation) call_ = call;
      hung_up = hung_up_;
    }
    if (hung_up) call->Cancel();
    WatchSilence(generation);
  }

  // While attempt `generation` runs: a backend that went silent (its health
  // checks unanswered, or its loop stalled) and has sent this request
  // nothing for silence_timeout loses it; OnDone moves it. On the client's
  // I/O thread, like the call's callbacks.
  void WatchSilence(uint64_t generation) {
    const auto limit = router_.options_.silence_timeout;
    if (limit.count() <= 0) return;
    const auto tick = std::max(std::chrono::milliseconds(50), limit / 4);
    router_.client_->After(tick, [self = shared_from_this(), generation, limit] {
      {
        MutexLock lock(self->mu_);
        if (self->generation_ != generation || self->ended_ == generation) return;  // that attempt ended
      }
      const auto now = self->router_.options_.env->Now();
      const int64_t since = self->backend_->silent_since_ns.load();
      const bool silent = since != 0 && now.time_since_epoch() - std::chrono::steady_clock::duration(since) >= limit &&
                          now - self->last_heard_ >= limit;
      if (!silent) return self->WatchSilence(generation);
      std::shared_ptr<HttpCall> call;
      {
        MutexLock lock(self->mu_);
        call = self->call_;
      }
      if (!call) return self->WatchSilence(generation);  // Attempt has not stored it yet
      self->silenced_ = true;
      self->backend_->healthy = false;
      call->Cancel();  // OnDone runs with "cancelled": the request moves
    });
  }

  std::string ResumeJson() const {
    nlohmann::json r = {{"id", *id_}, {"created", created_}};
    nlohmann::json choices = nlohmann::json::array();
    for (const Choice& c : choices_) choices.push_back({{"tokens", c.tokens}, {"started", c.opened}, {"done", c.finished}});
    r["choices"] = std::move(choices);
    return r.dump();
  }

  void OnHead(int status, const HttpHeaders& headers) {
    last_heard_ = router_.options_.env->Now();
    upstream_.status = status;
    for (const auto& [k, v] : headers) {
      if (strcasecmp(k.c_str(), "Content-Type") == 0) upstream_.content_type = v;
      if (strcasecmp(k.c_str(), "Retry-After") == 0 || strcasecmp(k.c_str(), "WWW-Authenticate") == 0) {
        upstream_.relayed.emplace_back(k, v);
      }
    }
    // A stream goes out event by event; an error (or a whole answer) whole.
    if (stream_ && status == 200) {
      upstream_.streaming = true;
      if (!reply_->started()) reply_->StartStream(200, upstream_.content_type, {{"Cache-Control", "no-cache"}});
    }
  }

  bool OnData(std::string data) {
    last_heard_ = router_.options_.env->Now();
    if (!upstream_.streaming) {
      if (upstream_.body.size() + data.size() > router_.options_.max_answer_bytes) return upstream_.too_large = true, false;
      upstream_.body += data;
      return true;
    }
    if (passthrough_) return Forward(std::move(data));
    upstream_.buffer += data;
    size_t at = 0;
    for (size_t end; (end = upstream_.buffer.find("\n\n", at)) != std::string::npos; at = end + 2) {
      const std::string_view event = std::string_view(upstream_.buffer).substr(at, end - at);
      std::optional<StreamTrace> trace = ParseStreamTrace(event);
      if (!trace) {
        if (!traced_) {  // not a tandem server's stream: relay it as it comes
          passthrough_ = true;
          std::string rest = upstream_.pending + upstream_.buffer.substr(at);
          upstream_.buffer.clear();
          upstream_.pending.clear();
          return Forward(std::move(rest));
        }
        if (IsDone(event)) upstream_.done = true;
        upstream_.pending.append(event).append("\n\n");
        continue;
      }
      traced_ = true;
      if (trace->id && !id_) {
        id_ = trace->id;
        created_ = trace->created;
      }
      if (trace->error_status == 500 || trace->error_status == 502 || trace->error_status == 503) {
        // The backend failed the stream (draining, a fault): move it, its error unsaid.
        upstream_.failed = "the backend's stream ended with a " + std::to_string(trace->error_status) + " error";
        upstream_.failed_status = trace->error_status;
        upstream_.buffer.clear();
        upstream_.pending.clear();
        return false;
      }
      if (trace->error_status != 0) upstream_.done = true;  // the client's error: said, and the stream ends
      if (client_traced_) upstream_.pending.append(event).append("\n\n");
      for (const StreamTrace::Choice& c : trace->choices) {
        if (c.index < 0 || size_t(c.index) >= choices_.size()) continue;
        Choice& mine = choices_[size_t(c.index)];
        mine.tokens.insert(mine.tokens.end(), c.tokens.begin(), c.tokens.end());
        mine.opened = mine.opened || c.opened;
        mine.finished = mine.finished || c.finished;
      }
      if (!upstream_.pending.empty() && !Forward(std::move(upstream_.pending))) return false;
      upstream_.pending.clear();
    }
    upstream_.buffer.erase(0, at);
    if (upstream_.buffer.size() + upstream_.pending.size() > router_.options_.max_answer_bytes) {
      upstream_.failed = "an untraced stream write over " + std::to_string(router_.options_.max_answer_bytes) + " bytes";
      return false;
    }
    return true;
  }

  bool Forward(std::string data) {
    if (reply_->Write(std::move(data))) return true;
    client_stalled_ = true;  // gone, or not reading: the answer cannot be whole
    return false;
  }

  void OnDone(const std::string& error) {
    {
      MutexLock lock(mu_);
      call_.reset();
      ended_ = generation_;
    }
    Backend* b = backend_;
    if (reply_->gone()) return;  // the client hung up (and so cancelled the call): says nothing of the backend
    if (upstream_.status != 0) ++b->forwarded;
    const std::string name = b->host + ":" + std::to_string(b->port);
    if (silenced_ && error == "cancelled") {  // taken from a backend that went silent (WatchSilence)
      ++b->failed;
      if (upstream_.streaming && client_stalled_) return reply_->Abort();
      if (upstream_.streaming && upstream_.done && upstream_.pending.empty() && upstream_.failed.empty()) {
        return reply_->End();
      }
      if (passthrough_) return reply_->Abort();  // an untraced stream cannot go on elsewhere
      return Move("decode backend " + name + " went silent: nothing for this request in " +
                      std::to_string(router_.options_.silence_timeout.count()) + " ms",
                  503, Router::kSilent);
    }
    if (upstream_.streaming) {
      if (client_stalled_) return reply_->Abort();
      // [DONE] went out: the answer is whole, however the connection ended after it.
      if (upstream_.done && upstream_.pending.empty() && upstream_.failed.empty()) return reply_->End();
      if (passthrough_) {
        if (error.empty()) return reply_->End();
        ++b->failed;
        return reply_->Abort();  // cut off: never a clean end
      }
      ++b->failed;
      const std::string why = !upstream_.failed.empty() ? upstream_.failed
                              : !error.empty()          ? "its stream broke off (" + error + ")"
                                                        : "its stream ended without [DONE]";
      // A lost connection (not the relay's own close after an error frame):
      // unhealthy until its next health check says otherwise.
      if (!error.empty() && upstream_.failed.empty()) b->healthy = false;
      if (upstream_.failed_status == 500) ran_.push_back(b);
      return Move("decode backend " + name + ": " + why, 503,
                  upstream_.failed_status != 0 ? Router::kStreamError : Router::kStreamBroke);
    }
    if (upstream_.status == 0) {
      ++b->failed;
      b->healthy = false;
      return Move("decode backend " + name + " did not answer (" + error + ")", 503, Router::kNoAnswer);
    }
    if (upstream_.too_large) {
      return SendApiError(*reply_, 502, "decode backend " + name + "'s answer is over " +
                                            std::to_string(router_.options_.max_answer_bytes) + " bytes", "server_error");
    }
    if (!error.empty()) {
      return Move("decode backend " + name + "'s answer broke off (" + error + ")", 502, Router::kAnswerBroke);
    }
    // 500, 502, 503: the backend's trouble (draining, no engine, a bug), not the request's.
    if (upstream_.status == 500 || upstream_.status == 502 || upstream_.status == 503) {
      if (upstream_.status == 503) b->healthy = false;
      if (upstream_.status == 500) ran_.push_back(b);
      last_answer_ = std::move(upstream_);
      return Move("decode backend " + name + " answered " + std::to_string(last_answer_->status), last_answer_->status,
                  last_answer_->status == 503 ? Router::kUnavailable : Router::kServerError);
    }
    if (reply_->started()) {  // a moved stream's backend refused the continuation: the client hears why
      auto answer = nlohmann::json::parse(upstream_.body, nullptr, false);
      if (!answer.is_object() || !answer.contains("error")) {
        ApiError e;
        e.http_status = upstream_.status;
        e.message = "decode backend " + name + " answered " + std::to_string(upstream_.status) + " to the continuation";
        e.type = "server_error";
        answer = nlohmann::json::parse(ErrorJson(e));
      }
      return EndWithError(answer.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), upstream_.status);
    }
    reply_->Send(upstream_.status, upstream_.content_type, std::move(upstream_.body), upstream_.relayed);
  }

  // The request goes on at another backend, if it has moves left.
  void Move(const std::string& why, int status, Router::MoveReason reason) {
    last_error_ = why;
    if (attempts_ > router_.options_.max_moves || router_.options_.env->Now() >= deadline_) {
      ++router_.moves_exhausted_;
      if (last_answer_ && !reply_->started()) {  // the backend's own answer says it best
        return reply_->Send(last_answer_->status, last_answer_->content_type, std::move(last_answer_->body),
                            last_answer_->relayed);
      }
      return GiveUp(why + (router_.options_.max_moves > 0
                               ? "; moved " + std::to_string(attempts_ - 1) + " times, which is the most allowed"
                               : ""),
                    status);
    }
    TLOG_WARN("tandem router: %s: moving the request to another backend\n", why.c_str());
    move_reason_ = reason;
    Attempt();
  }

  void GiveUp(const std::string& why, int status = 503) {
    if (!reply_->started()) return SendApiError(*reply_, status, why, "server_error");
    ApiError e;
    e.http_status = status;
    e.message = why;
    e.type = "server_error";
    EndWithError(ErrorJson(e), status);
  }

  // A stream's last frame: an error (with its trace, for a client that traces).
  void EndWithError(const std::string& error_json, int status) {
    std::string frame = "data: " + error_json + "\n\n";
    if (client_traced_) {
      StreamTrace t;
      t.error_status = status;
      frame += StreamTraceSse(t);
    }
    reply_->Write(std::move(frame));
    reply_->End();
  }

  Router& router_;
  const std::shared_ptr<HttpReply> reply_;
  const std::string method_, target_, authorization_;
  const bool stream_;
  const uint64_t conversation_;
  const std::vector<uint64_t> chain_;  // the prompt's page keys (placement by what is cached), or none
  const std::chrono::steady_clock::time_point deadline_;  // the whole request's, across its moves
  std::string body_;  // the client's, with the router's fields (seed, tandem_trace)

  // What one attempt's answer has done so far.
  struct Upstream {
    int status = 0;
    bool streaming = false, too_large = false, done = false;
    std::string content_type = "application/json", body;
    HttpHeaders relayed;  // Retry-After, WWW-Authenticate
    std::string buffer;   // stream bytes not yet split into events
    std::string pending;  // data events waiting for their trace
    std::string failed;   // why the stream is being moved, when it said so itself
    int failed_status = 0;  // the status of the error frame that said so
  };
  // On the client's I/O thread (or the first attempt's caller), one at a time.
  Backend* backend_ = nullptr;
  std::vector<const Backend*> tried_;
  // Backends that answered this request 500: once there is one, it runs only
  // on backends not in this list.
  std::vector<const Backend*> ran_;
  int attempts_ = 0;
  std::chrono::steady_clock::time_point wait_since_{};
  Upstream upstream_;
  std::optional<Upstream> last_answer_;  // a 5xx answer, sent if no move succeeds
  std::string last_error_;
  std::chrono::steady_clock::time_point last_heard_{};  // the attempt's last byte from its backend
  bool silenced_ = false;  // the attempt was taken from a silent backend
  Router::MoveReason move_reason_ = Router::kNoAnswer;  // what ended the last attempt
  bool traced_ = false, passthrough_ = false, client_stalled_ = false;
  bool client_traced_ = false;  // the client asked for the trace itself: it gets it
  std::optional<uint64_t> id_;  // the answer's, from its stream's first trace
  int64_t created_ = 0;
  std::vector<Choice> choices_ = std::vector<Choice>(1);

  Mutex mu_;
  std::shared_ptr<HttpCall> call_ GUARDED_BY(mu_);
  uint64_t generation_ GUARDED_BY(mu_) = 0;  // attempts started (call_ is the newest one's)
  uint64_t ended_ GUARDED_BY(mu_) = 0;       // the newest attempt whose OnDone ran
  bool hung_up_ GUARDED_BY(mu_) = false;
};

void Router::Forward(HttpRequest& req, const std::shared_ptr<HttpReply>& reply) {
  if (draining_) {
    ++unavailable_;
    return SendApiError(*reply, 503, "the router is draining (restarting); retry", "server_error");
  }
  // A POST body passes serve's own first checks (UTF-8, nesting, an object,
  // a boolean or null `stream`) before the router reads a field of it.
  nlohmann::json body;
  bool stream = false;
  if (req.method == "POST") {
    std::optional<ApiError> bad = ParseRequestBody(req.body, &body);
    if (!bad) bad = ReadStreamFlag(body, &stream);
    if (bad) {
      ++refused_;
      return reply->Send(bad->http_status, "application/json", ErrorJson(*bad));
    }
  }
  std::make_shared<Relay>(*this, req, reply, stream, body)->Start();
}

}  // namespace tandem
