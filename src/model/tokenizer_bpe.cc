// GPT-2 byte-level BPE encoding (tokenizer.ggml.model = "gpt2").
//
// The pre-tokenizer splits text into words; each word's bytes become the
// byte-level alphabet's tokens, then the adjacent pair with the lowest merge
// rank is merged until no listed merge applies (ties go to the leftmost pair).
#include <queue>

#include "model/pretokenizer.h"
#include "model/tokenizer.h"
#include "model/unicode.h"

namespace tandem {
namespace {

uint64_t MergeKey(int32_t left, int32_t right) {
  return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
}

// One token of a word being merged. A part merged into its left neighbour is
// marked dead.
struct Part {
  int32_t id;  // -1: a byte with no token, which no merge can involve
  int prev;
  int next;
  size_t start;
  size_t length;
  bool dead;
};

struct Candidate {
  int32_t rank;
  int left;
  int right;
  int32_t left_id;  // ids when queued, to recognise stale candidates
  int32_t right_id;
};

// Priority: lower rank first, then the leftmost pair.
struct LowerPriority {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

Status Tokenizer::LoadMerges(const GgufFile& gguf) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<std::string> merges,
                          gguf.GetStringArray("tokenizer.ggml.merges"));
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& merge = merges[rank];
    const std::string field = "tokenizer.ggml.merges[" + std::to_string(rank) + "] '" + merge + "'";
    // Search from 1 so that a left side spelled " " (unusual but legal) still splits.
    const size_t space = merge.find(' ', 1);
    if (space == std::string::npos) {
      return DataLoss(field + " is not two tokens separated by a space");
    }
    const std::string left = merge.substr(0, space), right = merge.substr(space + 1);
    const std::optional<int32_t> left_id = FindToken(left), right_id = FindToken(right);
    if (!left_id || !right_id) {
      return DataLoss(field + " names unknown token '" + (left_id ? right : left) + "'");
    }
    // A merge whose result is not a token could only lead to byte fallback; skip it.
    const std::optional<int32_t> result = FindToken(left + right);
    if (!result) continue;
    merges_.emplace(MergeKey(*left_id, *right_id), Merge{int32_t(rank), *result});
  }
  return Status::Ok();
}

const Tokenizer::Merge* Tokenizer::FindMerge(int32_t left, int32_t right) const {
  if (left < 0 || right < 0) return nullptr;
  auto it = merges_.find(MergeKey(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void Tokenizer::EncodeBpe(std::string_view text, std::vector<int32_t>* out) const {
  for (std::string_view word : PreTokenize(text, pre_)) EncodeBpeWord(word, out);
}

void Tokenizer::EncodeBpeWord(std::string_view word, std::vector<int32_t>* out) const {
  if (ignore_merges_) {
    std::string mapped;
    for (char c : word) unicode::AppendUtf8(unicode::ByteToUnicode(uint8_t(c)), &mapped);
    if (std::optional<int32_t> id = FindToken(mapped); id && CanMergeInto(*id)) {
      out->push_back(*id);
      return;
    }
  }
  std::vector<Part> parts;
  parts.reserve(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    parts.push_back({byte_tokens_[uint8_t(word[i])], int(i) - 1, int(i) + 1, i, 1, false});
  }
  if (parts.empty()) return;
  parts.back().next = -1;

  std::priority_queue<Candidate, std::vector<Candidate>, LowerPriority> queue;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    if (const Merge* m = FindMerge(parts[left].id, parts[right].id)) {
      queue.push({m->rank, left, right, parts[left].id, parts[right].id});
    }
  };
  for (size_t i = 1; i < parts.size(); ++i) try_add(int(i - 1), int(i));

  while (!queue.empty()) {
    const Candidate best = queue.top();
    queue.pop();
    Part& left = parts[best.left];
    Part& right = parts[best.right];
    if (left.dead || right.dead || left.next != best.right || left.id != best.left_id ||
        right.id != best.right_id) {
      continue;  // one side has changed since this candidate was queued
    }
    left.id = FindMerge(left.id, right.id)->result;
    left.length += right.length;
    left.next = right.next;
    right.dead = true;
    if (right.next >= 0) parts[right.next].prev = best.left;
    try_add(left.prev, best.left);
    try_add(best.left, left.next);
  }

  for (int i = 0; i >= 0; i = parts[i].next) {
    if (parts[i].id >= 0) {
      out->push_back(parts[i].id);
    } else {
      AppendByteFallback(word.substr(parts[i].start, parts[i].length), out);
    }
  }
}

}  // namespace tandem
