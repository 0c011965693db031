// Tool calls as they stream: <tool_call> blocks become a first delta (id and
// name) and then their arguments as the model writes them, as the official
// clients assemble tool_calls. Other formats, and blocks that do not begin
// {"name": "...", "arguments": {, are parsed whole (ParseToolCalls) when they
// end, so nothing parses differently from the non-streamed answer except
// that streamed arguments keep the model's own spacing and key order.
#include <nlohmann/json.hpp>

#include "server/openai_api.h"

namespace tandem {
namespace {

constexpr std::string_view kOpenTag = "<tool_call>";
constexpr std::string_view kCloseTag = "</tool_call>";

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// How much of `text`'s end could begin `tag`: that part is held back.
size_t HeldTail(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (tag.substr(0, n) == text.substr(text.size() - n)) return n;
  }
  return 0;
}

enum class Match { kMore, kYes, kNo };

// Reads `want` at *pos after optional spaces.
Match Expect(std::string_view s, size_t* pos, std::string_view want) {
  while (*pos < s.size() && IsSpace(s[*pos])) ++*pos;
  const std::string_view rest = s.substr(*pos);
  if (rest.size() < want.size()) return want.substr(0, rest.size()) == rest ? Match::kMore : Match::kNo;
  if (rest.substr(0, want.size()) != want) return Match::kNo;
  *pos += want.size();
  return Match::kYes;
}

// {"name": "<string>", "arguments": {  -> the name and where the arguments begin.
Match Header(std::string_view s, std::string* name, size_t* args_at) {
  size_t pos = 0;
  for (std::string_view part : {std::string_view("{"), std::string_view("\"name\""), std::string_view(":")}) {
    if (Match m = Expect(s, &pos, part); m != Match::kYes) return m;
  }
  while (pos < s.size() && IsSpace(s[pos])) ++pos;
  if (pos == s.size()) return Match::kMore;
  if (s[pos] != '"') return Match::kNo;
  size_t end = pos + 1;
  for (bool escaped = false; end < s.size(); ++end) {
    if (escaped) {
      escaped = false;
    } else if (s[end] == '\\') {
      escaped = true;
    } else if (s[end] == '"') {
      break;
    }
  }
  if (end == s.size()) return Match::kMore;
  const auto literal = nlohmann::json::parse(s.substr(pos, end + 1 - pos), nullptr, false);
  if (!literal.is_string() || literal.get_ref<const std::string&>().empty()) return Match::kNo;
  pos = end + 1;
  for (std::string_view part : {std::string_view(","), std::string_view("\"arguments\""), std::string_view(":"),
                                std::string_view("{")}) {
    if (Match m = Expect(s, &pos, part); m != Match::kYes) return m;
  }
  *name = literal.get<std::string>();
  *args_at = pos - 1;  // the arguments' '{'
  return Match::kYes;
}

}  // namespace

ToolCallStreamer::ToolCallStreamer(uint64_t request_id, ToolCallFormat format, int max_calls)
    : request_id_(request_id), format_(format), max_calls_(max_calls) {}

ToolCallStreamer::Out ToolCallStreamer::Push(std::string_view text) {
  buf_.append(text);
  Out out;
  if (format_ != ToolCallFormat::kTagged) return out;  // parsed whole at the end
  for (bool progress = true; progress;) {
    progress = false;
    switch (mode_) {
      case Mode::kText: {
        const size_t open = buf_.find(kOpenTag);
        if (open == std::string::npos) {
          const size_t keep = HeldTail(buf_, kOpenTag);
          out.content += buf_.substr(0, buf_.size() - keep);
          buf_.erase(0, buf_.size() - keep);
          break;
        }
        out.content += buf_.substr(0, open);
        buf_.erase(0, open + kOpenTag.size());
        mode_ = Mode::kHead;
        progress = true;
        break;
      }
      case Mode::kHead: {
        std::string name;
        size_t args_at = 0;
        const Match m = Header(buf_, &name, &args_at);
        if (m == Match::kMore) break;
        if (m == Match::kNo) {
          mode_ = Mode::kWhole;
        } else {
          Add({calls_, "call_" + std::to_string(request_id_) + "_" + std::to_string(calls_), name, ""}, &out);
          buf_.erase(0, args_at);
          depth_ = 0;
          in_string_ = escaped_ = false;
          mode_ = Mode::kArgs;
        }
        progress = true;
        break;
      }
      case Mode::kArgs: {
        size_t i = 0;
        bool ended = false;
        for (; i < buf_.size() && !ended; ++i) {
          const char c = buf_[i];
          if (in_string_) {
            if (escaped_) escaped_ = false;
            else if (c == '\\') escaped_ = true;
            else if (c == '"') in_string_ = false;
          } else if (c == '"') {
            in_string_ = true;
          } else if (c == '{' || c == '[') {
            ++depth_;
          } else if (c == '}' || c == ']') {
            ended = --depth_ == 0;
          }
        }
        if (i > 0) Add({calls_, "", "", buf_.substr(0, i)}, &out);
        buf_.erase(0, i);
        if (ended) {
          mode_ = Mode::kTail;
          progress = true;
        }
        break;
      }
      case Mode::kTail: {
        // The call is out; what is left of its block (the closing brace, keys
        // after the arguments that ParseToolCalls ignores too) is dropped up
        // to the closing tag.
        const size_t close = buf_.find(kCloseTag);
        if (close == std::string::npos) {
          buf_.erase(0, buf_.size() - HeldTail(buf_, kCloseTag));
          break;
        }
        ++calls_;
        buf_.erase(0, close + kCloseTag.size());
        mode_ = Mode::kText;
        progress = true;
        break;
      }
      case Mode::kWhole: {
        const size_t close = buf_.find(kCloseTag);
        if (close == std::string::npos) break;
        Emit(ParseToolCalls(std::string(kOpenTag) + buf_.substr(0, close + kCloseTag.size()), request_id_,
                            ToolCallFormat::kTagged),
             &out);
        buf_.erase(0, close + kCloseTag.size());
        mode_ = Mode::kText;
        progress = true;
        break;
      }
    }
  }
  return out;
}

ToolCallStreamer::Out ToolCallStreamer::Finish() {
  Out out;
  if (format_ != ToolCallFormat::kTagged) {
    Emit(ParseToolCalls(buf_, request_id_, format_), &out);
  } else if (mode_ == Mode::kHead || mode_ == Mode::kWhole) {
    // A last block cut short (a stop string, the token limit) still counts
    // if its JSON is complete.
    Emit(ParseToolCalls(std::string(kOpenTag) + buf_, request_id_, ToolCallFormat::kTagged), &out);
  } else if (mode_ == Mode::kText) {
    out.content = buf_;
  } else if (mode_ == Mode::kTail) {
    ++calls_;  // the block's unclosed rest is dropped, as ParseToolCalls does
  } else {  // kArgs: the call was cut short; its arguments are what was written
    ++calls_;
  }
  buf_.clear();
  return out;
}

// Whole calls (parsed at a block's end) as deltas: id and name, then all of
// the arguments. Call ids and indices continue this answer's count.
void ToolCallStreamer::Emit(const ParsedOutput& parsed, Out* out) {
  out->content += parsed.content;
  for (const ToolCall& call : parsed.tool_calls) {
    std::string id = call.id;
    if (format_ == ToolCallFormat::kTagged) id = "call_" + std::to_string(request_id_) + "_" + std::to_string(calls_);
    Add({calls_, std::move(id), call.name, call.arguments_json}, out);
    ++calls_;
  }
}

// Consecutive deltas of one call go out as one entry.
void ToolCallStreamer::Add(ToolCallDelta d, Out* out) {
  if (d.index >= max_calls_) return;
  if (!out->calls.empty() && out->calls.back().index == d.index) {
    out->calls.back().arguments += d.arguments;
    return;
  }
  out->calls.push_back(std::move(d));
}

}  // namespace tandem
