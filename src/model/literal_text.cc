#include "model/literal_text.h"

#include <charconv>

namespace tandem {
namespace {

constexpr std::string_view kOpen = "\xF4\x8F\xBF\xBD";   // U+10FFFD
constexpr std::string_view kClose = "\xF4\x8F\xBF\xBC";  // U+10FFFC
constexpr std::string_view kEscapedOpen = "o";            // a U+10FFFD of the client's own

}  // namespace

std::string MarkLiteral(const Tokenizer& tokenizer, std::string_view text) {
  std::string out;
  size_t copied = 0;
  for (size_t pos = 0; pos < text.size();) {
    std::string inner;
    size_t length = 0;
    if (text.substr(pos).starts_with(kOpen)) {
      inner = kEscapedOpen;
      length = kOpen.size();
    } else if (const int32_t id = tokenizer.MatchSpecialAt(text, pos);
               id >= 0 && tokenizer.token_type(id) == TokenType::kControl) {
      inner = std::to_string(id);
      length = tokenizer.TokenText(id).size();
    }
    if (length == 0) {
      ++pos;
      continue;
    }
    out.append(text.substr(copied, pos - copied));
    out.append(kOpen).append(inner).append(kClose);
    pos += length;
    copied = pos;
  }
  if (copied == 0) return std::string(text);
  out.append(text.substr(copied));
  return out;
}

UnmarkedPrompt UnmarkLiteral(const Tokenizer& tokenizer, std::string_view rendered) {
  UnmarkedPrompt out;
  size_t copied = 0;
  for (size_t pos = rendered.find(kOpen); pos != std::string_view::npos; pos = rendered.find(kOpen, pos)) {
    const size_t inner_at = pos + kOpen.size();
    const size_t close = rendered.find(kClose, inner_at);
    const std::string_view inner =
        close == std::string_view::npos ? std::string_view() : rendered.substr(inner_at, close - inner_at);
    std::string original;
    int32_t id = -1;
    if (inner == kEscapedOpen) {
      original = kOpen;
    } else if (!inner.empty() && inner.size() <= 10 &&
               std::from_chars(inner.data(), inner.data() + inner.size(), id).ptr == inner.data() + inner.size() &&
               id >= 0 && id < tokenizer.vocab_size()) {
      original = tokenizer.TokenText(id);
    } else {
      pos = inner_at;  // not a mark of ours: left as it is
      continue;
    }
    out.text.append(rendered.substr(copied, pos - copied));
    if (id >= 0) out.literal.push_back({out.text.size(), out.text.size() + original.size()});
    out.text.append(original);
    pos = close + kClose.size();
    copied = pos;
  }
  out.text.append(rendered.substr(copied));
  return out;
}

}  // namespace tandem
