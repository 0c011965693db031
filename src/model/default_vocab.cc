#include "model/default_vocab.h"

#include "model/gguf.h"

#include <cstdio>
#include <string_view>
#include <unordered_set>

#include "common/status.h"

namespace tandem {
namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 "▁"

constexpr std::string_view kWords[] = {
    "the",   "a",     "and",   "to",    "of",    "in",    "is",     "was",   "he",    "she",
    "it",    "you",   "that",  "for",   "on",    "with",  "as",     "his",   "her",   "they",
    "at",    "be",    "this",  "have",  "from",  "or",    "one",    "had",   "by",    "but",
    "not",   "what",  "all",   "were",  "we",    "when",  "your",   "can",   "said",  "there",
    "an",    "each",  "which", "do",    "how",   "their", "if",     "will",  "up",    "other",
    "about", "out",   "many",  "then",  "them",  "so",    "some",   "would", "make",  "like",
    "him",   "into",  "time",  "has",   "look",  "two",   "more",   "go",    "see",   "no",
    "way",   "could", "my",    "than",  "first", "been",  "who",    "its",   "now",   "day",
    "did",   "get",   "come",  "made",  "over",  "new",   "little", "big",   "happy", "friend",
    "play",  "mom",   "dad",   "very",  "once",  "upon",  "named",  "saw",   "went",  "wanted",
    "help",  "The",   "Once",  "One",   "He",    "She",   "They",   "It",    "I",     "Lily",
    "Tim",   "Ben",   "hello", "world", "Hello", "yes",   "good",
};

// Appends pieces in order, skipping repeats, until the vocab is full.
class VocabBuilder {
 public:
  explicit VocabBuilder(int32_t vocab_size) : size_(size_t(vocab_size)) {}

  bool full() const { return spec_.tokens.size() >= size_; }

  bool Add(std::string piece, int32_t type, float score) {
    if (full() || !seen_.insert(piece).second) return false;
    spec_.tokens.push_back(std::move(piece));
    spec_.types.push_back(type);
    spec_.scores.push_back(score);
    return true;
  }

  // Ordinary pieces score -1, -2, ... by position among ordinary pieces.
  void AddPiece(std::string piece) {
    if (Add(std::move(piece), 1, -float(ordinary_ + 1))) ++ordinary_;
  }

  // Every lowercase string of `length` letters, each after `prefix`.
  void AddLowercaseStrings(int length, std::string_view prefix) {
    std::string s(size_t(length), 'a');
    while (!full()) {
      AddPiece(std::string(prefix) + s);
      int k = length - 1;
      while (k >= 0 && s[k] == 'z') s[k--] = 'a';
      if (k < 0) return;  // wrapped around: all strings emitted
      ++s[k];
    }
  }

  VocabSpec Take() { return std::move(spec_); }

 private:
  size_t size_;
  int ordinary_ = 0;
  VocabSpec spec_;
  std::unordered_set<std::string> seen_;
};

}  // namespace

VocabSpec BuildDefaultVocab(int32_t vocab_size) {
  TANDEM_CHECK_MSG(vocab_size >= 512, "default vocab needs at least 512 tokens");
  VocabBuilder b(vocab_size);
  b.Add("<unk>", 2, 0.0f);
  b.Add("<s>", 3, 0.0f);
  b.Add("</s>", 3, 0.0f);
  for (int byte = 0; byte < 256; ++byte) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", byte);
    b.Add(name, 6, 0.0f);
  }
  const std::string space(kSpmSpace);
  b.AddPiece(space);
  for (char c = 0x21; c < 0x7F; ++c) b.AddPiece(std::string(1, c));
  for (char c = 0x21; c < 0x7F; ++c) b.AddPiece(space + c);
  // Each word after its prefixes: "▁t" (above), "▁th", "▁the".
  for (std::string_view word : kWords) {
    for (size_t n = 2; n <= word.size(); ++n) b.AddPiece(space + std::string(word.substr(0, n)));
  }
  b.AddLowercaseStrings(2, "");
  b.AddLowercaseStrings(2, space);
  for (int length = 3; !b.full(); ++length) {
    b.AddLowercaseStrings(length, "");
    b.AddLowercaseStrings(length, space);
  }
  return b.Take();
}

void WriteDefaultTokenizer(const VocabSpec& spec, GgufWriter& w) {
  w.SetString("tokenizer.ggml.model", "llama");
  w.SetStringArray("tokenizer.ggml.tokens", spec.tokens);
  w.SetFloatArray("tokenizer.ggml.scores", spec.scores);
  w.SetInt32Array("tokenizer.ggml.token_type", spec.types);
  w.SetUint32("tokenizer.ggml.bos_token_id", 1);
  w.SetUint32("tokenizer.ggml.eos_token_id", 2);
  w.SetUint32("tokenizer.ggml.unknown_token_id", 0);
}

}  // namespace tandem
