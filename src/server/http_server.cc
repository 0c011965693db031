#include "server/http_server.h"

#include <httplib.h>

#include <ctime>
#include <random>

#include "server/listen_backlog.h"

namespace tandem {
namespace {

void SendError(httplib::Response& res, const ApiError& e) {
  res.status = e.http_status;
  if (e.http_status == 429 || e.http_status == 503) res.set_header("Retry-After", "1");
  res.set_content(ErrorJson(e), "application/json");
}

int64_t UnixNow() { return int64_t(std::time(nullptr)); }

constexpr auto kEventWait = std::chrono::milliseconds(50);

}  // namespace

HttpServer::HttpServer(Engine& engine, const Model& model, ServerOptions options)
    : engine_(engine), model_(model), options_(std::move(options)) {
  info_.id = options_.model_id.empty() ? model.config().name : options_.model_id;
  info_.context_length = engine.context_tokens();
  info_.tokenizer = &model.tokenizer();
  info_.chat_format = &model.chat_format();
  info_.created = UnixNow();
  info_.attention = engine.cache_spec().attention;
  info_.logprobs = !engine.remote_prefill();
}

HttpServer::~HttpServer() { Stop(std::chrono::milliseconds(0)); }

Status HttpServer::Start() {
  server_ = std::make_unique<httplib::Server>();
  const int threads = options_.http_threads;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  server_->set_payload_max_length(options_.max_body_bytes);
  // A connection may wait for a free handler thread under load; do not drop
  // it for being slow to be read (cpp-httplib's default is 5 s).
  server_->set_read_timeout(60, 0);
  server_->set_write_timeout(60, 0);
  Routes();
  port_ = options_.port;
  if (port_ == 0) {
    port_ = server_->bind_to_any_port(options_.host);
    if (port_ < 0) return Unavailable("cannot bind any port on " + options_.host);
  } else if (!server_->bind_to_port(options_.host, port_)) {
    return Unavailable("cannot bind " + options_.host + ":" + std::to_string(port_) +
                       " (in use, or not an address of this host)");
  }
  RaiseListenBacklog(port_);
  if (!StartListening(*server_, &listener_, std::chrono::seconds(10))) {
    return Unavailable("the HTTP listener on port " + std::to_string(port_) + " did not start within 10 s");
  }
  return Status::Ok();
}

void HttpServer::Stop(std::chrono::milliseconds grace) {
  if (!server_) return;
  const auto until = std::chrono::steady_clock::now() + grace;
  while (active_streams_.load() > 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  server_->stop();
  if (listener_.joinable()) listener_.join();
  server_.reset();
}

void HttpServer::Routes() {
  httplib::Server& s = *server_;
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const EngineStats st = engine_.Stats();
    res.status = st.healthy ? 200 : 503;
    res.set_content(std::string("{\"status\":\"") + (st.healthy ? "ok" : "unavailable") + "\"}",
                    "application/json");
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(engine_.metrics().Text(), "text/plain; version=0.0.4");
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(ModelsJson(info_), "application/json");
  });
  s.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleCompletion(req, res, true);
  });
  s.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleCompletion(req, res, false);
  });
  // Errors httplib produces itself (404 route, 413 body too large) in OpenAI's shape.
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e;
    e.http_status = res.status;
    if (res.status == 413) {
      e.message = "request body is too large";
    } else if (res.status == 404) {
      e.message = "no route for " + req.method + " " + req.path;
    } else {
      e.message = "HTTP error " + std::to_string(res.status);
    }
    SendError(res, e);
  });
}

void HttpServer::HandleCompletion(const httplib::Request& req, httplib::Response& res, bool chat) {
  ParseResult parsed = chat ? ParseChatCompletionRequest(req.body, info_)
                            : ParseCompletionRequest(req.body, info_);
  if (auto* e = std::get_if<ApiError>(&parsed)) return SendError(res, *e);
  ParsedRequest& p = std::get<ParsedRequest>(parsed);
  if (!p.has_seed) p.spec.sampling.seed = std::random_device{}() | (uint64_t(std::random_device{}()) << 32);
  auto handle = engine_.Submit(p.spec);
  if (!handle.ok()) return SendError(res, ApiErrorFromStatus(handle.status()));
  if (p.stream) return Stream(p, *handle, res);
  Collect(p, **handle, res);
}

void HttpServer::Collect(const ParsedRequest& p, RequestHandle& handle, httplib::Response& res) {
  std::string text = p.echo_text;  // empty without echo
  std::vector<int32_t> tokens;
  std::vector<PositionLogprobs> logprobs;
  StreamEvent ev;
  for (;;) {
    if (!handle.Next(&ev, kEventWait)) continue;  // the engine's deadline bounds this wait
    if (ev.kind == StreamEvent::Kind::kText) {
      logprobs.insert(logprobs.end(), ev.prompt_logprobs.begin(), ev.prompt_logprobs.end());  // echo: first
      text += ev.text;
      tokens.insert(tokens.end(), ev.tokens.begin(), ev.tokens.end());
      logprobs.insert(logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
      continue;
    }
    if (ev.kind == StreamEvent::Kind::kError) return SendError(res, ApiErrorFromStatus(ev.error));
    break;
  }
  const ResponseMeta meta{p.model, handle.id(), UnixNow(), false};
  const Usage usage{ev.prompt_tokens, ev.completion_tokens, ev.cached_prompt_tokens};
  const std::vector<int32_t>* ids = p.return_token_ids ? &tokens : nullptr;
  const LogprobsOut lp{info_.tokenizer, logprobs, 0};
  const LogprobsOut* lpp = p.spec.logprobs >= 0 ? &lp : nullptr;
  if (p.chat) {
    const ParsedOutput out = p.tools_enabled ? ParseToolCalls(text, handle.id(), p.tool_format) : ParsedOutput{text, {}};
    res.set_content(ChatCompletionJson(meta, out, ev.finish_reason, usage, ids, lpp), "application/json");
  } else {
    res.set_content(CompletionJson(meta, text, ev.finish_reason, usage, ids, lpp), "application/json");
  }
}

// Server-sent events. The provider runs on this connection's HTTP thread and
// returns after each write; a failed write or a closed socket cancels.
void HttpServer::Stream(const ParsedRequest& p, std::shared_ptr<RequestHandle> handle,
                        httplib::Response& res) {
  struct State {
    bool started = false, done = false;
    std::string held;  // tool-call requests: text is parsed at the end
    std::vector<int32_t> held_tokens;  // and its token ids
    std::vector<PositionLogprobs> held_logprobs;  // logprobs of tokens whose text is not out yet
    int64_t text_offset = 0;                      // completions: bytes of the tokens whose logprobs went out
  };
  auto state = std::make_shared<State>();
  const ResponseMeta meta{p.model, handle->id(), UnixNow(), p.include_usage};
  ++active_streams_;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, p, meta, handle, state](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& frame) { return sink.write(frame.data(), frame.size()); };
        if (state->done) return false;
        if (!sink.is_writable()) {
          handle->Cancel();
          return false;
        }
        if (p.chat && !state->started) {
          state->started = true;
          ChatDelta d;
          d.role = true;
          d.content = "";
          if (!write(ChatChunkSse(meta, d))) return handle->Cancel(), false;
        }
        StreamEvent ev;
        if (!handle->Next(&ev, kEventWait)) return true;  // nothing yet: called again
        std::string frame;
        if (p.echo && !state->started) {  // the prompt first, with its logprobs when asked
          state->started = true;
          const LogprobsOut lp{info_.tokenizer, ev.prompt_logprobs, 0};
          if (!write(CompletionChunkSse(meta, p.echo_text, "", nullptr, p.spec.logprobs >= 0 ? &lp : nullptr))) {
            return handle->Cancel(), false;
          }
          for (const PositionLogprobs& e : ev.prompt_logprobs) {
            state->text_offset += int64_t(info_.tokenizer->TokenBytes(e.chosen.token).size());
          }
        }
        if (ev.kind == StreamEvent::Kind::kText) {
          // A token whose text is held (an incomplete character, a possible
          // stop string) sends its logprobs with the next text that goes out.
          state->held_logprobs.insert(state->held_logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
          if (ev.text.empty() && (ev.tokens.empty() || !p.return_token_ids)) return true;
          if (p.chat && p.tools_enabled) {
            state->held += ev.text;
            state->held_tokens.insert(state->held_tokens.end(), ev.tokens.begin(), ev.tokens.end());
            return true;
          }
          const LogprobsOut lp{info_.tokenizer, state->held_logprobs, state->text_offset};
          const LogprobsOut* lpp = p.spec.logprobs >= 0 ? &lp : nullptr;
          if (p.chat) {
            ChatDelta d;
            d.content = ev.text;
            if (p.return_token_ids) d.token_ids = ev.tokens;
            if (lpp) d.logprobs = *lpp;
            frame = ChatChunkSse(meta, d);
          } else {
            frame = CompletionChunkSse(meta, ev.text, "", p.return_token_ids ? &ev.tokens : nullptr, lpp);
          }
          for (const PositionLogprobs& e : state->held_logprobs) {
            state->text_offset += int64_t(info_.tokenizer->TokenBytes(e.chosen.token).size());
          }
          state->held_logprobs.clear();
          if (!write(frame)) return handle->Cancel(), false;
          return true;
        }
        state->done = true;
        if (ev.kind == StreamEvent::Kind::kError) {
          const ApiError e = ApiErrorFromStatus(ev.error);
          write("data: " + ErrorJson(e) + "\n\n");
        } else {
          const Usage usage{ev.prompt_tokens, ev.completion_tokens, ev.cached_prompt_tokens};
          // Logprobs still held (tool-call text, a final cut) go out with the last chunks.
          const LogprobsOut lp{info_.tokenizer, state->held_logprobs, state->text_offset};
          const bool rest = p.spec.logprobs >= 0 && !state->held_logprobs.empty();
          if (p.chat) {
            ChatDelta d;
            std::string reason = ev.finish_reason;
            if (p.tools_enabled) {
              const ParsedOutput out = ParseToolCalls(state->held, handle->id(), p.tool_format);
              if (!out.content.empty()) d.content = out.content;
              d.tool_calls = out.tool_calls;
              if (!out.tool_calls.empty()) reason = "tool_calls";
              if (p.return_token_ids) d.token_ids = state->held_tokens;
              if (rest) d.logprobs = lp;
              if (d.content || !d.tool_calls.empty() || d.token_ids || d.logprobs) frame += ChatChunkSse(meta, d);
              d = ChatDelta{};
            } else if (rest) {
              d.logprobs = lp;
            }
            d.finish_reason = reason;
            frame += ChatChunkSse(meta, d);
          } else {
            frame += CompletionChunkSse(meta, "", ev.finish_reason, nullptr, rest ? &lp : nullptr);
          }
          if (p.include_usage) frame += UsageChunkSse(meta, p.chat, usage);
          frame += DoneSse();
          write(frame);
        }
        sink.done();
        return true;
      },
      [this, handle](bool) {
        handle->Cancel();  // a no-op if the request already finished
        --active_streams_;
      });
}

}  // namespace tandem
