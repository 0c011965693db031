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
  InstallCors(*server_, options_.access);
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
  s.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (!Admit(options_.access, req, res)) return;
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
  if (!Admit(options_.access, req, res)) return;
  ParseResult parsed = chat ? ParseChatCompletionRequest(req.body, info_)
                            : ParseCompletionRequest(req.body, info_);
  if (auto* e = std::get_if<ApiError>(&parsed)) return SendError(res, *e);
  ParsedRequest& p = std::get<ParsedRequest>(parsed);
  if (!p.has_seed) p.spec.sampling.seed = std::random_device{}() | (uint64_t(std::random_device{}()) << 32);
  // Every choice must be done by one deadline: the request's timeout from now.
  if (p.n > 1) p.spec.deadline = std::chrono::steady_clock::now() + engine_.options().request_timeout;
  std::vector<std::shared_ptr<RequestHandle>> handles;
  auto first = engine_.Submit(p.spec);
  if (!first.ok()) return SendError(res, ApiErrorFromStatus(first.status()));
  handles.push_back(*first);
  if (p.n > 1) {
    // The other choices are sent once the first one's prompt is computed (its
    // first event), so they find its pages in the prefix cache. The engine's
    // deadline bounds this wait.
    while (!handles[0]->WaitForEvent(kEventWait)) {
    }
    for (int i = 1; i < p.n; ++i) {
      RequestSpec spec = p.spec;
      spec.sampling.seed = ChoiceSeed(p.spec.sampling.seed, i);
      auto h = engine_.Submit(std::move(spec));
      if (!h.ok()) {
        for (auto& submitted : handles) submitted->Cancel();
        return SendError(res, ApiErrorFromStatus(h.status()));
      }
      handles.push_back(*h);
    }
  }
  if (p.stream) return Stream(p, std::move(handles), res);
  Collect(p, handles, res);
}

// Each choice's answer in turn (they run concurrently in the engine).
void HttpServer::Collect(const ParsedRequest& p, const std::vector<std::shared_ptr<RequestHandle>>& handles,
                         httplib::Response& res) {
  std::vector<std::string> responses;
  Usage total;
  for (size_t c = 0; c < handles.size(); ++c) {
    RequestHandle& handle = *handles[c];
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
      if (ev.kind == StreamEvent::Kind::kError) {
        for (auto& h : handles) h->Cancel();
        return SendError(res, ApiErrorFromStatus(ev.error));
      }
      break;
    }
    ResponseMeta meta{p.model, handles[0]->id(), UnixNow(), false};
    meta.choice = int(c);
    const Usage usage{ev.prompt_tokens, ev.completion_tokens, ev.cached_prompt_tokens};
    total.prompt_tokens = usage.prompt_tokens;
    total.cached_tokens = c == 0 ? usage.cached_tokens : total.cached_tokens;
    total.completion_tokens += usage.completion_tokens;
    const std::vector<int32_t>* ids = p.return_token_ids ? &tokens : nullptr;
    const LogprobsOut lp{info_.tokenizer, logprobs, 0};
    const LogprobsOut* lpp = p.spec.logprobs >= 0 ? &lp : nullptr;
    if (p.chat) {
      ParsedOutput out = p.tools_enabled ? ParseToolCalls(text, handle.id(), p.tool_format) : ParsedOutput{text, {}};
      if (!p.parallel_tool_calls && out.tool_calls.size() > 1) out.tool_calls.resize(1);
      responses.push_back(ChatCompletionJson(meta, out, ev.finish_reason, usage, ids, lpp));
    } else {
      responses.push_back(CompletionJson(meta, text, ev.finish_reason, usage, ids, lpp));
    }
  }
  res.set_content(responses.size() == 1 ? responses[0] : MergeChoices(responses, total), "application/json");
}

namespace {

// One choice of a streamed answer.
struct StreamChoice {
  std::shared_ptr<RequestHandle> handle;
  ResponseMeta meta;
  bool started = false, done = false;
  std::unique_ptr<ToolCallStreamer> tools;      // tool-enabled chats: text becomes content and call deltas
  std::vector<int32_t> held_tokens;             // ids of tokens whose text the streamer holds
  std::vector<PositionLogprobs> held_logprobs;  // logprobs of tokens whose text is not out yet
  int64_t text_offset = 0;                      // completions: bytes of the tokens whose logprobs went out
  Usage usage;
};

// The SSE frames one engine event of one choice makes (possibly none). Sets
// c.done at the choice's end; *error is the error frame if it failed.
std::string ChoiceFrames(const ParsedRequest& p, const Tokenizer& tok, StreamChoice& c, StreamEvent& ev,
                         bool* failed) {
  std::string frame;
  if (p.echo && !c.started) {  // the prompt first, with its logprobs when asked
    c.started = true;
    const LogprobsOut lp{&tok, ev.prompt_logprobs, 0};
    frame += CompletionChunkSse(c.meta, p.echo_text, "", nullptr, p.spec.logprobs >= 0 ? &lp : nullptr);
    for (const PositionLogprobs& e : ev.prompt_logprobs) c.text_offset += int64_t(tok.TokenBytes(e.chosen.token).size());
  }
  if (ev.kind == StreamEvent::Kind::kText) {
    // A token whose text is held (an incomplete character, a possible stop
    // string) sends its logprobs with the next text that goes out.
    c.held_logprobs.insert(c.held_logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
    if (ev.text.empty() && (ev.tokens.empty() || !p.return_token_ids)) return frame;
    if (c.tools) {
      c.held_tokens.insert(c.held_tokens.end(), ev.tokens.begin(), ev.tokens.end());
      ToolCallStreamer::Out out = c.tools->Push(ev.text);
      if (out.content.empty() && out.calls.empty()) return frame;
      ChatDelta d;
      if (!out.content.empty()) d.content = std::move(out.content);
      d.tool_calls = std::move(out.calls);
      if (p.return_token_ids) d.token_ids = std::move(c.held_tokens);
      c.held_tokens.clear();
      if (p.spec.logprobs >= 0) d.logprobs = LogprobsOut{&tok, c.held_logprobs, 0};
      frame += ChatChunkSse(c.meta, d);
      c.held_logprobs.clear();
      return frame;
    }
    const LogprobsOut lp{&tok, c.held_logprobs, c.text_offset};
    const LogprobsOut* lpp = p.spec.logprobs >= 0 ? &lp : nullptr;
    if (p.chat) {
      ChatDelta d;
      d.content = ev.text;
      if (p.return_token_ids) d.token_ids = ev.tokens;
      if (lpp) d.logprobs = *lpp;
      frame += ChatChunkSse(c.meta, d);
    } else {
      frame += CompletionChunkSse(c.meta, ev.text, "", p.return_token_ids ? &ev.tokens : nullptr, lpp);
    }
    for (const PositionLogprobs& e : c.held_logprobs) c.text_offset += int64_t(tok.TokenBytes(e.chosen.token).size());
    c.held_logprobs.clear();
    return frame;
  }
  c.done = true;
  if (ev.kind == StreamEvent::Kind::kError) {
    *failed = true;
    return frame + "data: " + ErrorJson(ApiErrorFromStatus(ev.error)) + "\n\n";
  }
  c.usage = Usage{ev.prompt_tokens, ev.completion_tokens, ev.cached_prompt_tokens};
  // Logprobs still held (tool-call text, a final cut) go out with the last chunks.
  const LogprobsOut lp{&tok, c.held_logprobs, c.text_offset};
  const bool rest = p.spec.logprobs >= 0 && !c.held_logprobs.empty();
  if (!p.chat) return frame + CompletionChunkSse(c.meta, "", ev.finish_reason, nullptr, rest ? &lp : nullptr);
  ChatDelta d;
  std::string reason = ev.finish_reason;
  if (c.tools) {
    ToolCallStreamer::Out out = c.tools->Finish();
    if (!out.content.empty()) d.content = std::move(out.content);
    d.tool_calls = std::move(out.calls);
    if (c.tools->calls() > 0 && reason == "stop") reason = "tool_calls";
    if (p.return_token_ids && !c.held_tokens.empty()) d.token_ids = c.held_tokens;
    if (rest) d.logprobs = lp;
    if (d.content || !d.tool_calls.empty() || d.token_ids || d.logprobs) frame += ChatChunkSse(c.meta, d);
    d = ChatDelta{};
  } else if (rest) {
    d.logprobs = lp;
  }
  d.finish_reason = reason;
  return frame + ChatChunkSse(c.meta, d);
}

}  // namespace

// Server-sent events. The provider runs on this connection's HTTP thread and
// returns after each write; a failed write or a closed socket cancels every
// choice. With n > 1 the choices' chunks interleave as their tokens come,
// each carrying its index; the usage chunk (summed) and [DONE] follow the last.
void HttpServer::Stream(const ParsedRequest& p, std::vector<std::shared_ptr<RequestHandle>> handles,
                        httplib::Response& res) {
  struct State {
    std::vector<StreamChoice> choices;
    size_t next = 0;  // the choice polled first, in turn
    bool done = false;
  };
  auto state = std::make_shared<State>();
  for (size_t i = 0; i < handles.size(); ++i) {
    StreamChoice c;
    c.handle = handles[i];
    c.meta = ResponseMeta{p.model, handles[0]->id(), UnixNow(), p.include_usage};
    c.meta.choice = int(i);
    if (p.chat && p.tools_enabled) c.tools = std::make_unique<ToolCallStreamer>(handles[i]->id(), p.tool_format, p.parallel_tool_calls ? 1 << 30 : 1);
    state->choices.push_back(std::move(c));
  }
  auto cancel_all = [state] {
    for (StreamChoice& c : state->choices) c.handle->Cancel();  // a no-op for a finished request
  };
  ++active_streams_;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, p, state, cancel_all](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& frame) { return sink.write(frame.data(), frame.size()); };
        if (state->done) return false;
        if (!sink.is_writable()) return cancel_all(), false;
        std::vector<StreamChoice>& choices = state->choices;
        if (p.chat) {
          for (StreamChoice& c : choices) {
            if (c.started) continue;
            c.started = true;
            ChatDelta d;
            d.role = true;
            d.content = "";
            if (!write(ChatChunkSse(c.meta, d))) return cancel_all(), false;
          }
        }
        // The next choice, in turn, that has an event; with one choice, wait for it.
        StreamEvent ev;
        StreamChoice* from = nullptr;
        for (size_t k = 0; k < choices.size() && from == nullptr; ++k) {
          StreamChoice& c = choices[(state->next + k) % choices.size()];
          const auto wait = choices.size() == 1 ? kEventWait : std::chrono::milliseconds(0);
          if (!c.done && c.handle->Next(&ev, wait)) from = &c;
        }
        if (from == nullptr) {
          if (choices.size() > 1) {
            for (StreamChoice& c : choices) {
              if (!c.done) {
                c.handle->WaitForEvent(kEventWait);
                break;
              }
            }
          }
          return true;  // nothing yet: called again
        }
        state->next = size_t(from - choices.data()) + 1;
        bool failed = false;
        std::string frame = ChoiceFrames(p, *info_.tokenizer, *from, ev, &failed);
        if (failed) {
          cancel_all();
          state->done = true;
          write(frame);
          sink.done();
          return true;
        }
        const bool all_done = std::all_of(choices.begin(), choices.end(), [](const StreamChoice& c) { return c.done; });
        if (!all_done) {
          if (!frame.empty() && !write(frame)) return cancel_all(), false;
          return true;
        }
        state->done = true;
        if (p.include_usage) {
          Usage total = choices[0].usage;
          for (size_t i = 1; i < choices.size(); ++i) total.completion_tokens += choices[i].usage.completion_tokens;
          frame += UsageChunkSse(choices[0].meta, p.chat, total);
        }
        frame += DoneSse();
        write(frame);
        sink.done();
        return true;
      },
      [this, cancel_all](bool) {
        cancel_all();
        --active_streams_;
      });
}

}  // namespace tandem
