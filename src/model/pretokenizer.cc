#include "model/pretokenizer.h"

#include "model/unicode.h"

namespace tandem {
namespace {

enum class CharClass { kLetter, kNumber, kSpace, kOther };

struct Char {
  char32_t code_point;
  size_t start;
  size_t length;
  CharClass cls;
};

std::vector<Char> Classify(std::string_view text) {
  std::vector<Char> chars;
  chars.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const unicode::DecodedChar d = unicode::DecodeAt(text, pos);
    Char c{d.valid ? d.code_point : char32_t(0xFFFD), pos, size_t(d.length), CharClass::kOther};
    if (!d.valid) {
      c.cls = CharClass::kOther;
    } else if (unicode::IsLetter(d.code_point)) {
      c.cls = CharClass::kLetter;
    } else if (unicode::IsNumber(d.code_point)) {
      c.cls = CharClass::kNumber;
    } else if (unicode::IsWhitespace(d.code_point)) {
      c.cls = CharClass::kSpace;
    }
    chars.push_back(c);
    pos += d.length;
  }
  return chars;
}

char32_t AsciiLower(char32_t c) { return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c; }

// Matches one word starting at chars[i]; returns the index one past its end.
class Scanner {
 public:
  Scanner(const std::vector<Char>& chars, PreTokenizerKind kind) : c_(chars), kind_(kind) {}

  size_t Match(size_t i) const {
    return kind_ == PreTokenizerKind::kGpt2 ? MatchGpt2(i) : MatchLlama3(i);
  }

 private:
  bool Is(size_t i, CharClass cls) const { return i < c_.size() && c_[i].cls == cls; }
  bool IsNewline(size_t i) const {
    return i < c_.size() && (c_[i].code_point == '\r' || c_[i].code_point == '\n');
  }
  bool IsSpaceChar(size_t i) const { return i < c_.size() && c_[i].code_point == ' '; }
  size_t RunEnd(size_t i, CharClass cls) const {
    while (Is(i, cls)) ++i;
    return i;
  }

  // 's 't 're 've 'm 'll 'd; returns i if none matches.
  size_t MatchContraction(size_t i, bool ignore_case) const {
    if (i + 1 >= c_.size() || c_[i].code_point != '\'') return i;
    auto at = [&](size_t k) {
      if (k >= c_.size()) return char32_t(0);
      return ignore_case ? AsciiLower(c_[k].code_point) : c_[k].code_point;
    };
    const char32_t a = at(i + 1), b = at(i + 2);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return i;
  }

  // The whitespace alternatives shared by all three expressions:
  // [\s*[\r\n]+ |] \s+(?!\S) | \s+
  size_t MatchWhitespace(size_t i, bool newline_rule) const {
    const size_t end = RunEnd(i, CharClass::kSpace);
    if (newline_rule) {
      for (size_t k = end; k > i; --k) {
        if (IsNewline(k - 1)) return k;  // greedy \s* backs off to the last newline
      }
    }
    if (end == c_.size() || end - i == 1) return end;
    return end - 1;  // leave one space to prefix the next word
  }

  size_t MatchLlama3(size_t i) const {
    if (size_t end = MatchContraction(i, /*ignore_case=*/true); end != i) return end;
    if (Is(i, CharClass::kLetter)) return RunEnd(i, CharClass::kLetter);
    if (!IsNewline(i) && !Is(i, CharClass::kNumber) && Is(i + 1, CharClass::kLetter)) {
      return RunEnd(i + 1, CharClass::kLetter);
    }
    if (Is(i, CharClass::kNumber)) {
      const size_t max_digits = kind_ == PreTokenizerKind::kQwen2 ? 1 : 3;
      size_t end = i;
      while (end - i < max_digits && Is(end, CharClass::kNumber)) ++end;
      return end;
    }
    size_t j = IsSpaceChar(i) && Is(i + 1, CharClass::kOther) ? i + 1 : i;
    if (Is(j, CharClass::kOther)) {
      j = RunEnd(j, CharClass::kOther);
      while (IsNewline(j)) ++j;
      return j;
    }
    if (Is(i, CharClass::kSpace)) return MatchWhitespace(i, /*newline_rule=*/true);
    return i + 1;  // unreachable: every class is handled above
  }

  size_t MatchGpt2(size_t i) const {
    if (size_t end = MatchContraction(i, /*ignore_case=*/false); end != i) return end;
    for (CharClass cls : {CharClass::kLetter, CharClass::kNumber, CharClass::kOther}) {
      const size_t j = IsSpaceChar(i) && Is(i + 1, cls) ? i + 1 : i;
      if (Is(j, cls)) return RunEnd(j, cls);
    }
    if (Is(i, CharClass::kSpace)) return MatchWhitespace(i, /*newline_rule=*/false);
    return i + 1;  // unreachable
  }

  const std::vector<Char>& c_;
  PreTokenizerKind kind_;
};

}  // namespace

std::vector<std::string_view> PreTokenize(std::string_view text, PreTokenizerKind kind) {
  const std::vector<Char> chars = Classify(text);
  const Scanner scanner(chars, kind);
  std::vector<std::string_view> words;
  for (size_t i = 0; i < chars.size();) {
    const size_t end = scanner.Match(i);
    const size_t byte_end = chars[end - 1].start + chars[end - 1].length;
    words.push_back(text.substr(chars[i].start, byte_end - chars[i].start));
    i = end;
  }
  return words;
}

}  // namespace tandem
