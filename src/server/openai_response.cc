// Response bodies and SSE frames in OpenAI's shapes. Fields are written in
// the order OpenAI's own responses use, which keeps captured traffic easy to
// compare by eye.
#include <nlohmann/json.hpp>

#include <cmath>

#include "server/openai_api.h"
#include "server/openai_json.h"

namespace tandem {
namespace {

using Out = nlohmann::ordered_json;
using openai_internal::Dump;

Out NullIfEmpty(const std::string& s) { return s.empty() ? Out(nullptr) : Out(s); }

Out UsageObject(const Usage& u) {
  Out out;
  out["prompt_tokens"] = u.prompt_tokens;
  out["completion_tokens"] = u.completion_tokens;
  out["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  out["prompt_tokens_details"] = Out{{"cached_tokens", u.cached_tokens}};
  return out;
}

Out Envelope(const ResponseMeta& meta, bool chat, const char* object) {
  Out out;
  out["id"] = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(meta.request_id);
  out["object"] = object;
  out["created"] = meta.created;
  out["model"] = meta.model;
  return out;
}

Out FinishReasonJson(std::string_view reason) {
  return reason.empty() ? Out(nullptr) : Out(std::string(reason));
}

// A message's whole calls (streamed deltas carry an index and come piecewise: ChatChunkSse).
Out ToolCallsArray(const std::vector<ToolCall>& calls) {
  Out array = Out::array();
  for (const ToolCall& c : calls) {
    array.push_back(Out{{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments_json}}}});
  }
  return array;
}

std::string Sse(const Out& value) { return "data: " + Dump(value) + "\n\n"; }

// A token's text as it would stream alone: incomplete or invalid UTF-8 becomes U+FFFD.
std::string TokenString(const Tokenizer& tok, int32_t id) {
  StreamDecoder d(tok);
  std::string text = d.Push(id);
  return text + d.Flush();
}

Out BytesArray(const std::string& bytes) {
  Out a = Out::array();
  for (unsigned char c : bytes) a.push_back(int(c));
  return a;
}

// OpenAI writes impossible tokens as -9999.0; JSON has no -inf (it would be null).
double Logprob(float lp) { return std::isfinite(lp) ? double(lp) : -9999.0; }

Out ChatLogprobs(const LogprobsOut& lp) {
  auto entry = [&](const TokenLogprob& t) {
    Out e;
    e["token"] = TokenString(*lp.tokenizer, t.token);
    e["logprob"] = Logprob(t.logprob);
    e["bytes"] = BytesArray(lp.tokenizer->TokenBytes(t.token));
    return e;
  };
  Out content = Out::array();
  for (const PositionLogprobs& p : lp.entries) {
    Out e = entry(p.chosen);
    Out top = Out::array();
    for (const TokenLogprob& t : p.top) top.push_back(entry(t));
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return Out{{"content", std::move(content)}, {"refusal", nullptr}};
}

Out CompletionLogprobs(const LogprobsOut& lp) {
  Out tokens = Out::array(), token_logprobs = Out::array(), top = Out::array(), offsets = Out::array();
  int64_t offset = lp.text_offset;
  for (const PositionLogprobs& p : lp.entries) {
    const std::string text = TokenString(*lp.tokenizer, p.chosen.token);
    tokens.push_back(text);
    offsets.push_back(offset);
    offset += int64_t(lp.tokenizer->TokenBytes(p.chosen.token).size());  // in bytes of the token itself
    if (!p.has_logprob) {  // an echoed prompt's first token: nothing predicts it
      token_logprobs.push_back(nullptr);
      top.push_back(nullptr);
      continue;
    }
    token_logprobs.push_back(Logprob(p.chosen.logprob));
    // The alternatives and, as OpenAI's legacy API does, the chosen token.
    Out alternatives = Out::object();
    for (const TokenLogprob& t : p.top) {
      const std::string alt = TokenString(*lp.tokenizer, t.token);
      if (!alternatives.contains(alt)) alternatives[alt] = Logprob(t.logprob);  // two ids can spell the same text
    }
    if (!alternatives.contains(text)) alternatives[text] = Logprob(p.chosen.logprob);
    top.push_back(std::move(alternatives));
  }
  Out out;
  out["tokens"] = std::move(tokens);
  out["token_logprobs"] = std::move(token_logprobs);
  out["top_logprobs"] = std::move(top);
  out["text_offset"] = std::move(offsets);
  return out;
}

}  // namespace

std::string ErrorJson(const ApiError& e) {
  Out error;
  error["message"] = e.message;
  error["type"] = e.type;
  error["param"] = NullIfEmpty(e.param);
  error["code"] = NullIfEmpty(e.code);
  return Dump(Out{{"error", std::move(error)}});
}

ApiError ApiErrorFromStatus(const Status& s) {
  ApiError e;
  e.message = s.message().empty() ? StatusCodeName(s.code()) : s.message();
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      e.http_status = 400;
      e.type = "invalid_request_error";
      break;
    case StatusCode::kNotFound:
      e.http_status = 404;
      e.type = "invalid_request_error";
      e.code = "not_found";
      break;
    case StatusCode::kResourceExhausted:
      e.http_status = 429;
      e.type = "rate_limit_error";
      e.code = "rate_limit_exceeded";
      break;
    case StatusCode::kUnavailable:
      e.http_status = 503;
      e.type = "server_error";
      e.code = "service_unavailable";
      break;
    case StatusCode::kDeadlineExceeded:
      e.http_status = 504;
      e.type = "server_error";
      e.code = "timeout";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      break;
  }
  return e;
}

std::string ChatCompletionJson(const ResponseMeta& meta, const ParsedOutput& output,
                               std::string_view finish_reason, const Usage& usage,
                               const std::vector<int32_t>* token_ids, const LogprobsOut* logprobs) {
  const bool has_calls = !output.tool_calls.empty();
  Out message;
  message["role"] = "assistant";
  message["content"] = has_calls && output.content.empty() ? Out(nullptr) : Out(output.content);
  if (has_calls) message["tool_calls"] = ToolCallsArray(output.tool_calls);
  Out choice;
  choice["index"] = meta.choice;
  choice["message"] = std::move(message);
  choice["logprobs"] = logprobs ? ChatLogprobs(*logprobs) : Out(nullptr);
  choice["finish_reason"] =
      has_calls && finish_reason == "stop" ? Out("tool_calls") : FinishReasonJson(finish_reason);
  if (token_ids != nullptr) choice["token_ids"] = *token_ids;
  Out out = Envelope(meta, /*chat=*/true, "chat.completion");
  out["choices"] = Out::array({std::move(choice)});
  out["usage"] = UsageObject(usage);
  return Dump(out);
}

std::string CompletionJson(const ResponseMeta& meta, std::string_view text,
                           std::string_view finish_reason, const Usage& usage,
                           const std::vector<int32_t>* token_ids, const LogprobsOut* logprobs) {
  Out choice;
  choice["text"] = std::string(text);
  choice["index"] = meta.choice;
  choice["logprobs"] = logprobs ? CompletionLogprobs(*logprobs) : Out(nullptr);
  choice["finish_reason"] = FinishReasonJson(finish_reason);
  if (token_ids != nullptr) choice["token_ids"] = *token_ids;
  Out out = Envelope(meta, /*chat=*/false, "text_completion");
  out["choices"] = Out::array({std::move(choice)});
  out["usage"] = UsageObject(usage);
  return Dump(out);
}

std::string ChatChunkSse(const ResponseMeta& meta, const ChatDelta& delta) {
  Out d = Out::object();
  if (delta.role) d["role"] = "assistant";
  if (delta.content) d["content"] = *delta.content;
  if (!delta.tool_calls.empty()) {
    Out calls = Out::array();
    for (const ToolCallDelta& t : delta.tool_calls) {
      Out call;
      call["index"] = t.index;
      if (!t.id.empty()) call["id"] = t.id, call["type"] = "function";
      Out fn = Out::object();
      if (!t.name.empty()) fn["name"] = t.name;
      fn["arguments"] = t.arguments;
      call["function"] = std::move(fn);
      calls.push_back(std::move(call));
    }
    d["tool_calls"] = std::move(calls);
  }
  Out choice;
  choice["index"] = meta.choice;
  choice["delta"] = std::move(d);
  choice["logprobs"] = delta.logprobs ? ChatLogprobs(*delta.logprobs) : Out(nullptr);
  choice["finish_reason"] = FinishReasonJson(delta.finish_reason);
  if (delta.token_ids) choice["token_ids"] = *delta.token_ids;
  Out out = Envelope(meta, /*chat=*/true, "chat.completion.chunk");
  out["choices"] = Out::array({std::move(choice)});
  if (meta.include_usage) out["usage"] = nullptr;
  return Sse(out);
}

std::string CompletionChunkSse(const ResponseMeta& meta, std::string_view text,
                               std::string_view finish_reason, const std::vector<int32_t>* token_ids,
                               const LogprobsOut* logprobs) {
  Out choice;
  choice["text"] = std::string(text);
  choice["index"] = meta.choice;
  choice["logprobs"] = logprobs ? CompletionLogprobs(*logprobs) : Out(nullptr);
  choice["finish_reason"] = FinishReasonJson(finish_reason);
  if (token_ids != nullptr) choice["token_ids"] = *token_ids;
  Out out = Envelope(meta, /*chat=*/false, "text_completion");
  out["choices"] = Out::array({std::move(choice)});
  if (meta.include_usage) out["usage"] = nullptr;
  return Sse(out);
}

std::string MergeChoices(const std::vector<std::string>& responses, const Usage& usage) {
  TANDEM_CHECK(!responses.empty());
  Out out = Out::parse(responses[0]);
  for (size_t i = 1; i < responses.size(); ++i) out["choices"].push_back(Out::parse(responses[i])["choices"][0]);
  out["usage"] = UsageObject(usage);
  return Dump(out);
}

std::string UsageChunkSse(const ResponseMeta& meta, bool chat, const Usage& usage) {
  Out out = Envelope(meta, chat, chat ? "chat.completion.chunk" : "text_completion");
  out["choices"] = Out::array();
  out["usage"] = UsageObject(usage);
  return Sse(out);
}

std::string DoneSse() { return "data: [DONE]\n\n"; }

namespace {

Out ModelObject(const ModelInfo& model) {
  Out out;
  out["id"] = model.id;
  out["object"] = "model";
  out["created"] = model.created;
  out["owned_by"] = "tandem";
  out["context_length"] = model.context_length;  // extension: clients size prompts by it
  // Extension: what a reference engine needs to reproduce this server's
  // outputs exactly (`tandem verify` reads it from transcripts).
  Out attention;
  attention["kind"] = model.attention.kind == AttentionKind::kSparse ? "sparse" : "dense";
  attention["top_k"] = model.attention.top_k;
  attention["index_k_dtype"] = model.attention.index_k_dtype == CacheDType::kBF16 ? "bf16" : "fp8";
  attention["kv_dtype"] = CacheDTypeName(model.attention.kv_dtype);
  out["tandem"] = {{"attention", std::move(attention)}};
  if (model.chat_format != nullptr) out["tandem"]["chat_format"] = model.chat_format->Identity();
  // What a verdict on this server's outputs may claim (invariant 9): equal
  // identities are judged exactly, others by the reference's logprobs.
  if (model.numerics != nullptr) out["tandem"]["numerics"] = Out(model.numerics->ToJson());
  return out;
}

}  // namespace

std::string ModelJson(const ModelInfo& model) { return Dump(ModelObject(model)); }

std::string ModelsJson(const ModelInfo& model) {
  Out out;
  out["object"] = "list";
  out["data"] = Out::array({ModelObject(model)});
  return Dump(out);
}

}  // namespace tandem
