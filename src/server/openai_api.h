// The OpenAI-compatible API surface as pure functions: request bodies in,
// engine requests out; engine results in, response JSON and SSE frames out.
// Nothing here does I/O or touches the engine, so the HTTP layer stays thin
// and every rule about the wire format is testable on its own.
//
// Thread safety: every function is pure; a ModelInfo's tokenizer is immutable
// (see model/tokenizer.h), so any number of threads may call these at once.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/splitmix.h"
#include "common/status.h"
#include "model/cache_spec.h"
#include "model/chat_template.h"
#include "model/numerics.h"
#include "model/tokenizer.h"
#include "runtime/request.h"

namespace tandem {

// ---------------------------------------------------------------- errors

// An error in OpenAI's shape. Empty param / code are written as JSON null.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;
  std::string code;
};

// {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
std::string ErrorJson(const ApiError& e);

// InvalidArgument / OutOfRange -> 400 invalid_request_error, NotFound -> 404,
// ResourceExhausted -> 429 rate_limit_error, Unavailable -> 503,
// DeadlineExceeded -> 504, anything else -> 500 server_error.
// REQUIRES: !s.ok().
ApiError ApiErrorFromStatus(const Status& s);

// ---------------------------------------------------------------- requests

struct ModelInfo {
  std::string id;  // the name clients send as "model"
  int64_t context_length = 0;
  const Tokenizer* tokenizer = nullptr;  // not owned; outlives every call
  const ChatFormat* chat_format = nullptr;  // not owned; outlives every call
  int64_t created = 0;  // unix seconds, for /v1/models
  AttentionOptions attention;  // reported by /v1/models (extension "tandem")
  const NumericsIdentity* numerics = nullptr;  // not owned; reported by /v1/models when set
  bool logprobs = true;        // false: requests with logprobs are refused (a disaggregated decode server)
};

constexpr int kMaxChoices = 16;  // n

// Choice i's seed: choice 0 keeps the request's, so n = 1 and the first of n
// choices are the same answer; the others draw from (seed, i) alone.
inline uint64_t ChoiceSeed(uint64_t seed, int choice) {
  return choice == 0 ? seed : SplitMix64(seed ^ SplitMix64(0x6e63686f69636573ull + uint64_t(choice)));
}

struct ParsedRequest {
  RequestSpec spec;  // prompt tokens, sampling, max_tokens, stop, ignore_eos
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool chat = false;           // chat.completions (true) or completions (false)
  bool tools_enabled = false;  // tools were sent and tool_choice is not "none"
  ToolCallFormat tool_format = ToolCallFormat::kTagged;  // how the answer's calls are parsed
  bool parallel_tool_calls = true;  // false: at most one call is returned (the first)
  bool has_seed = false;       // false: the caller should pick a fresh seed per request,
                               // or every unseeded request would sample identically
  bool return_token_ids = false;  // tandem extension: choices carry "token_ids" (the
                                  // generated ids behind that text), so a client can
                                  // check outputs token for token (`tandem verify`)
  // tandem extension "tandem_trace" (a router's; streams only): each write of
  // the stream ends with an SSE comment naming what it delivered (StreamTrace).
  bool trace = false;
  // tandem extension "tandem_resume": the stream continues one that another
  // server began and broke off (a router moving it). Streams only.
  struct Resume {
    uint64_t id = 0;      // the answer's id ("chatcmpl-<id>"), kept across servers
    int64_t created = 0;  // its "created"
    struct Choice {
      std::vector<int32_t> tokens;  // delivered already (RequestSpec::resumed)
      bool started = false;         // its opening frame (role, echo) went out
      bool done = false;            // its final frame went out
    };
    std::vector<Choice> choices;  // n of them
  };
  std::optional<Resume> resume;
  // "cache_salt" (vLLM's name): the tenant whose prefix cache this request
  // may use, whatever its API key (server/access.h, CacheSaltFor).
  std::optional<std::string> cache_salt;
  std::string model;           // as the client sent it (the served id if absent)
  int n = 1;                   // choices; each is its own engine request (ChoiceSeed)
  bool echo = false;           // completions: the prompt comes back before the answer
  std::string echo_text;       // with echo: the prompt as sent (token ids: their bytes)
};

using ParseResult = std::variant<ParsedRequest, ApiError>;

// The stream trace (ParsedRequest::trace): after each write of a traced
// stream, one SSE comment event ": tandem {json}\n\n" says what the write
// delivered — per choice, the tokens whose text and logprobs are now out,
// whether its opening and final frames went; or an error frame's status.
// The stream's first event is a trace with the answer's id and created. A
// router that forwards a write only with its trace knows, when the stream
// breaks, exactly what the client has (ParsedRequest::Resume).
struct StreamTrace {
  struct Choice {
    int index = 0;
    std::vector<int32_t> tokens;
    bool opened = false, finished = false;
  };
  std::vector<Choice> choices;
  int error_status = 0;          // the write is an error frame with this status
  std::optional<uint64_t> id;    // the first trace only
  int64_t created = 0;
};
std::string StreamTraceSse(const StreamTrace& trace);
// An SSE event's text (without its blank line): its trace when it is one.
std::optional<StreamTrace> ParseStreamTrace(std::string_view event);

// Parse and validate a request body. Every failure names the offending field.
// Unknown fields are ignored; fields whose meaning we cannot honour (echo in
// chat, suffix, best_of > 1, schema keywords outside the subset) are rejected
// rather than silently dropped.
// Chat: the messages (and tools) are rendered through the model's chat
// template and tokenized with special tokens parsed; BOS is added unless the
// template writes it. Completions: "prompt" is a string, an array of one
// string, or an array of token ids (or an array of one such array).
ParseResult ParseChatCompletionRequest(std::string_view body, const ModelInfo& model);
ParseResult ParseCompletionRequest(std::string_view body, const ModelInfo& model);

// ---------------------------------------------------------------- tool calls

struct ToolCall {
  std::string id;  // "call_<request id>_<index>"; kMistral: 9 letters and digits
  std::string name;
  std::string arguments_json;  // a JSON text, as OpenAI sends "arguments"
};

struct ParsedOutput {
  std::string content;  // the text outside tool-call blocks (trimmed if there were calls)
  std::vector<ToolCall> tool_calls;
};

// The tool calls in an answer, by format:
//   kTagged: every <tool_call>{json}</tool_call> block whose JSON is an object
//     with a string "name" and an "arguments" object or string; a final block
//     missing its closing tag counts if its JSON is complete. Blocks that do
//     not parse stay in the content verbatim.
//   kJson: the whole answer (after an optional <|python_tag|>) is one such
//     object, with "parameters" or "arguments", or an array of them.
//   kMistral: the text after [TOOL_CALLS] is an array of such objects (or one);
//     the text before it is the content.
// An answer that is not a well-formed call in its format is all content.
ParsedOutput ParseToolCalls(std::string_view text, uint64_t request_id,
                            ToolCallFormat format = ToolCallFormat::kTagged);

// One piece of a streamed tool call: its first has the id and name.
struct ToolCallDelta {
  int index = 0;
  std::string id, name;   // empty after the call's first delta
  std::string arguments;  // the next piece of the arguments' JSON text
};

// A tool-enabled answer as it streams, split into content and tool-call
// deltas. kTagged: text outside <tool_call> blocks goes out at once; a block
// that begins {"name": "...", "arguments": {  goes out as its id and name,
// then its arguments as they are written; any other block is parsed whole
// (ParseToolCalls) when it closes. Other formats are parsed whole at the end.
// One per answer; not thread-safe.
class ToolCallStreamer {
 public:
  // max_calls: calls past it are dropped (parallel_tool_calls: false).
  ToolCallStreamer(uint64_t request_id, ToolCallFormat format, int max_calls = 1 << 30);
  struct Out {
    std::string content;
    std::vector<ToolCallDelta> calls;
  };
  Out Push(std::string_view text);  // newly final text
  Out Finish();                     // the answer ended
  int calls() const { return calls_; }

 private:
  enum class Mode { kText, kHead, kArgs, kTail, kWhole };
  void Emit(const ParsedOutput& parsed, Out* out);
  void Add(ToolCallDelta d, Out* out);

  const uint64_t request_id_;
  const ToolCallFormat format_;
  const int max_calls_;
  std::string buf_;  // text not yet sent
  Mode mode_ = Mode::kText;
  int calls_ = 0;
  int depth_ = 0;  // kArgs: JSON nesting of the arguments
  bool in_string_ = false, escaped_ = false;
};

// ---------------------------------------------------------------- responses

// What every response and chunk of one request shares.
struct ResponseMeta {
  std::string model;
  uint64_t request_id = 0;     // ids are "chatcmpl-<id>" / "cmpl-<id>"
  int64_t created = 0;         // unix seconds
  bool include_usage = false;  // streaming: non-final chunks carry "usage": null
  int choice = 0;              // choices[0].index (n > 1: which choice this is)
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache
};

// choices[0].logprobs of a request that asked for them: one entry per
// generated token. Chat: {"content": [{token, logprob, bytes, top_logprobs}],
// "refusal": null}; completions: {tokens, token_logprobs, top_logprobs,
// text_offset}. A token's "token" is its text (invalid UTF-8 as U+FFFD);
// "bytes" are its exact bytes.
struct LogprobsOut {
  const Tokenizer* tokenizer = nullptr;
  std::span<const PositionLogprobs> entries;
  int64_t text_offset = 0;  // completions: where entries[0]'s text starts in the choice's text
};

// A chat.completion. finish_reason is "stop" or "length"; "stop" becomes
// "tool_calls" when the output carries tool calls. Content is null when
// there are tool calls and no other text.
// token_ids, when given, is written as choices[0].token_ids (return_token_ids).
std::string ChatCompletionJson(const ResponseMeta& meta, const ParsedOutput& output,
                               std::string_view finish_reason, const Usage& usage,
                               const std::vector<int32_t>* token_ids = nullptr,
                               const LogprobsOut* logprobs = nullptr);
// A text_completion.
std::string CompletionJson(const ResponseMeta& meta, std::string_view text,
                           std::string_view finish_reason, const Usage& usage,
                           const std::vector<int32_t>* token_ids = nullptr,
                           const LogprobsOut* logprobs = nullptr);

// One chat.completion.chunk's delta. A stream is: a chunk with role, chunks
// with content and tool-call deltas (ToolCallStreamer), a chunk with
// finish_reason and an empty delta, the usage chunk if asked, [DONE].
struct ChatDelta {
  bool role = false;                   // delta.role = "assistant"
  std::optional<std::string> content;  // delta.content
  std::vector<ToolCallDelta> tool_calls;  // delta.tool_calls
  std::string finish_reason;           // non-empty only on the final chunk
  std::optional<std::vector<int32_t>> token_ids;  // choices[0].token_ids (return_token_ids)
  std::optional<LogprobsOut> logprobs;             // choices[0].logprobs of this chunk's tokens
};

// Each returns one SSE frame: "data: {json}\n\n".
std::string ChatChunkSse(const ResponseMeta& meta, const ChatDelta& delta);
std::string CompletionChunkSse(const ResponseMeta& meta, std::string_view text,
                               std::string_view finish_reason,
                               const std::vector<int32_t>* token_ids = nullptr,
                               const LogprobsOut* logprobs = nullptr);
// The usage chunk (choices: []) sent after the final chunk when include_usage.
std::string UsageChunkSse(const ResponseMeta& meta, bool chat, const Usage& usage);
std::string DoneSse();  // "data: [DONE]\n\n"

// n > 1: the responses of each choice (each a one-choice response from the
// functions above, choice i written with index i) as one response: their
// choices in order, the first's id, usage summed over the choices' completions.
std::string MergeChoices(const std::vector<std::string>& single_choice_responses, const Usage& usage);

// GET /v1/models and GET /v1/models/{id}.
std::string ModelsJson(const ModelInfo& model);
std::string ModelJson(const ModelInfo& model);

}  // namespace tandem
