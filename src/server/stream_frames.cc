#include "server/stream_frames.h"

namespace tandem {

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
  if (!p.chat) return frame + CompletionChunkSse(c.meta, "", FinishReasonName(ev.finish), nullptr, rest ? &lp : nullptr);
  ChatDelta d;
  std::string reason = FinishReasonName(ev.finish);
  if (c.tools) {
    ToolCallStreamer::Out out = c.tools->Finish();
    if (!out.content.empty()) d.content = std::move(out.content);
    d.tool_calls = std::move(out.calls);
    if (c.tools->calls() > 0 && ev.finish == FinishReason::kStop) reason = "tool_calls";
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

}  // namespace tandem
