// SentencePiece-style encoding (tokenizer.ggml.model = "llama").
//
// Spaces become "▁", the text is split into UTF-8 characters, and the
// adjacent pair whose concatenation is a vocab piece with the highest score is
// merged until no pair is a piece (ties go to the leftmost pair). Characters
// left over that are not pieces become byte tokens <0xXX>, or one <unk>.
#include <queue>

#include "model/tokenizer.h"
#include "model/unicode.h"

namespace tandem {
namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 "▁"

// A run of bytes of the escaped text, linked to its neighbours. A symbol that
// has been merged into its left neighbour has length 0.
struct Symbol {
  int prev;
  int next;
  size_t start;
  size_t length;
};

struct Candidate {
  float score;
  int left;
  int right;
  size_t length;  // of the merged piece; stale candidates no longer match
};

// Priority: higher score first, then the leftmost pair.
struct LowerPriority {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

// Pieces the merge loop may produce: never control, unknown or byte tokens,
// whose spellings ("<s>", "<0x41>") are not text.
bool Tokenizer::CanMergeInto(int32_t id) const {
  const TokenType t = types_[id];
  return t == TokenType::kNormal || t == TokenType::kUserDefined || t == TokenType::kUndefined ||
         t == TokenType::kUnused;
}

void Tokenizer::EncodeSpm(std::string_view text, bool prefix_space,
                          std::vector<int32_t>* out) const {
  std::string escaped;
  escaped.reserve(text.size() + 8);
  if (prefix_space) escaped += kSpmSpace;
  for (char c : text) {
    if (c == ' ') {
      escaped += kSpmSpace;
    } else {
      escaped.push_back(c);
    }
  }

  std::vector<Symbol> symbols;
  for (size_t pos = 0; pos < escaped.size();) {
    const size_t length = size_t(unicode::DecodeAt(escaped, pos).length);
    const int index = int(symbols.size());
    symbols.push_back({index - 1, index + 1, pos, length});
    pos += length;
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  std::priority_queue<Candidate, std::vector<Candidate>, LowerPriority> queue;
  std::string piece;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    piece.assign(escaped, symbols[left].start, symbols[left].length + symbols[right].length);
    auto it = token_ids_.find(piece);
    if (it == token_ids_.end() || !CanMergeInto(it->second)) return;
    queue.push({scores_[it->second], left, right, piece.size()});
  };
  for (size_t i = 1; i < symbols.size(); ++i) try_add(int(i - 1), int(i));

  while (!queue.empty()) {
    const Candidate best = queue.top();
    queue.pop();
    Symbol& left = symbols[best.left];
    Symbol& right = symbols[best.right];
    if (left.length == 0 || right.length == 0 || left.next != best.right ||
        left.length + right.length != best.length) {
      continue;  // one side has changed since this candidate was queued
    }
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = best.left;
    try_add(left.prev, best.left);
    try_add(best.left, left.next);
  }

  for (int i = 0; i >= 0; i = symbols[i].next) {
    piece.assign(escaped, symbols[i].start, symbols[i].length);
    auto it = token_ids_.find(piece);
    if (it != token_ids_.end() && CanMergeInto(it->second)) {
      out->push_back(it->second);
    } else {
      AppendByteFallback(piece, out);
    }
  }
}

}  // namespace tandem
