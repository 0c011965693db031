// One streamed choice's state and the SSE frames an engine event makes of
// it (server/http_server.cc's exchanges; the stream trace of
// server/openai_api.h counts on what a write leaves held: only text that is
// a function of the delivered tokens).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/request.h"
#include "server/openai_api.h"

namespace tandem {

// One choice of a streamed answer.
struct StreamChoice {
  std::shared_ptr<RequestHandle> handle;  // null until submitted (n > 1: after the first choice's first event)
  ResponseMeta meta;
  bool started = false, done = false;
  std::unique_ptr<ToolCallStreamer> tools;      // tool-enabled chats: text becomes content and call deltas
  std::vector<int32_t> held_tokens;             // ids of tokens whose text the streamer holds
  std::vector<PositionLogprobs> held_logprobs;  // logprobs of tokens whose text is not out yet
  int64_t text_offset = 0;                      // completions: bytes of the tokens whose logprobs went out
  std::vector<int32_t> untraced;                // tokens not yet named by a stream trace (ParsedRequest::trace)
  std::optional<StreamEvent> tail;              // the text the end flushed: written with the finish, in one write
  Usage usage;
  // Collected (not streamed) answers.
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<PositionLogprobs> logprobs;
  std::string finish_reason;
};

// The SSE frames one engine event of one choice makes (possibly none). Sets
// c.done at the choice's end; *failed when it failed (the frames then end
// with its error frame).
std::string ChoiceFrames(const ParsedRequest& p, const Tokenizer& tok, StreamChoice& c, StreamEvent& ev,
                         bool* failed);

}  // namespace tandem
