#include "structured/grammar.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <string>

namespace tandem {
namespace {

// Nesting a state may reach, and the ways it may continue at once. Past them
// a continuation is dropped, deterministically (the others stay, so what is
// still allowed is valid and an answer can always be closed): a request
// cannot make a state, its cache key or one step unbounded. JSON nested 256
// deep takes about 512 entries.
constexpr size_t kMaxStackDepth = 512;
constexpr size_t kMaxStacks = 256;
constexpr int32_t kInfinite = std::numeric_limits<int32_t>::max() / 4;

}  // namespace

ByteSet& ByteSet::Add(uint8_t lo, uint8_t hi) {
  for (int c = lo; c <= hi; ++c) bits_[size_t(c) >> 6] |= uint64_t(1) << (c & 63);
  return *this;
}

// ---------------------------------------------------------------- builder

int32_t GrammarBuilder::Rule() {
  ++symbols_;  // a rule costs about what a symbol does
  rules_.emplace_back();
  return int32_t(rules_.size() - 1);
}

void GrammarBuilder::Alternative(int32_t rule, Sequence symbols) {
  symbols_ += symbols.size() + 1;
  rules_[size_t(rule)].push_back(std::move(symbols));
}

int32_t GrammarBuilder::Set(const ByteSet& set) {
  auto it = std::find(sets_.begin(), sets_.end(), set);
  if (it == sets_.end()) it = sets_.insert(sets_.end(), set);
  return -int32_t(it - sets_.begin()) - 2;
}

void GrammarBuilder::Literal(Sequence& seq, std::string_view text) {
  for (char c : text) seq.push_back(Byte(uint8_t(c)));
}

StatusOr<std::shared_ptr<const Grammar>> GrammarBuilder::Build(int32_t root) && {
  auto g = std::shared_ptr<Grammar>(new Grammar());
  const size_t n = rules_.size();
  if (root < 0 || size_t(root) >= n) return InvalidArgument("grammar: no root rule");
  g->root_ = root;
  g->sets_ = std::move(sets_);
  g->rule_alternatives_.resize(n);
  for (size_t r = 0; r < n; ++r) {
    if (rules_[r].empty()) return InvalidArgument("grammar: rule " + std::to_string(r) + " has no alternative");
    for (const Sequence& alt : rules_[r]) {
      g->rule_alternatives_[r].push_back(int32_t(g->elements_.size()));
      for (int32_t sym : alt) {
        if (sym >= int32_t(n)) return InvalidArgument("grammar: reference to a missing rule");
        g->elements_.push_back(sym);
      }
      g->elements_.push_back(Grammar::kEnd);
    }
  }
  // Fewest bytes each rule matches (a fixed point: it only decreases).
  std::vector<int32_t> rule_min(n, kInfinite);
  auto alt_min = [&](const Sequence& alt) {
    int64_t sum = 0;
    for (int32_t sym : alt) sum += sym >= 0 ? rule_min[size_t(sym)] : 1;
    return int32_t(std::min<int64_t>(sum, kInfinite));
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      for (const Sequence& alt : rules_[r]) {
        const int32_t m = alt_min(alt);
        if (m < rule_min[r]) rule_min[r] = m, changed = true;
      }
    }
  }
  for (size_t r = 0; r < n; ++r) {
    if (rule_min[r] >= kInfinite) return InvalidArgument("grammar: rule " + std::to_string(r) + " can never finish");
  }
  g->min_from_.assign(g->elements_.size(), 0);
  for (size_t p = g->elements_.size(); p-- > 0;) {
    const int32_t e = g->elements_[p];
    if (e == Grammar::kEnd) continue;
    const int32_t next = g->elements_[p + 1] == Grammar::kEnd ? 0 : g->min_from_[p + 1];
    g->min_from_[p] = std::min(kInfinite, next + (e >= 0 ? rule_min[size_t(e)] : 1));
  }
  // Left recursion: a rule reaching itself through rules that can match
  // nothing would expand forever.
  std::vector<std::vector<int32_t>> leftmost(n);
  for (size_t r = 0; r < n; ++r) {
    for (const Sequence& alt : rules_[r]) {
      for (int32_t sym : alt) {
        if (sym < 0) break;
        leftmost[r].push_back(sym);
        if (rule_min[size_t(sym)] > 0) break;
      }
    }
  }
  std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the path, 2 done
  for (size_t start = 0; start < n; ++start) {
    if (color[start]) continue;
    std::vector<std::pair<int32_t, size_t>> path{{int32_t(start), 0}};
    color[start] = 1;
    while (!path.empty()) {
      auto& [r, i] = path.back();
      if (i == leftmost[size_t(r)].size()) {
        color[size_t(r)] = 2;
        path.pop_back();
        continue;
      }
      const int32_t s = leftmost[size_t(r)][i++];
      if (color[size_t(s)] == 1) return InvalidArgument("grammar: rule " + std::to_string(s) + " is left-recursive");
      if (color[size_t(s)] == 0) {
        color[size_t(s)] = 1;
        path.push_back({s, 0});
      }
    }
  }
  return std::shared_ptr<const Grammar>(std::move(g));
}

// ---------------------------------------------------------------- states

// Moves the stack to positions that match a byte next (or to empty, for a
// finished sentence), expanding rules into each of their alternatives.
void Grammar::Expand(std::vector<int32_t>& stack, std::vector<std::vector<int32_t>>* out) const {
  for (;;) {
    if (out->size() >= kMaxStacks || stack.size() > kMaxStackDepth) return;
    if (stack.empty()) return out->push_back(stack);
    const int32_t p = stack.back();
    const int32_t e = elements_[size_t(p)];
    if (e == kEnd) {
      stack.pop_back();
      continue;
    }
    if (e <= -2) return out->push_back(stack);
    // A rule: continue after it once it is matched (nothing to continue
    // with at an alternative's end: a tail call keeps repetition flat).
    if (elements_[size_t(p) + 1] == kEnd) {
      stack.pop_back();
    } else {
      stack.back() = p + 1;
    }
    const std::vector<int32_t>& alts = rule_alternatives_[size_t(e)];
    for (size_t i = 0; i < alts.size(); ++i) {
      std::vector<int32_t> copy = stack;
      copy.push_back(alts[i]);
      Expand(copy, out);
    }
    return;
  }
}

void Grammar::Normalize(std::vector<std::vector<int32_t>>* stacks) const {
  std::sort(stacks->begin(), stacks->end());
  stacks->erase(std::unique(stacks->begin(), stacks->end()), stacks->end());
}

Grammar::State Grammar::Start() const {
  State s;
  for (int32_t alt : rule_alternatives_[size_t(root_)]) {
    std::vector<int32_t> stack{alt};
    Expand(stack, &s.stacks);
  }
  Normalize(&s.stacks);
  return s;
}

bool Grammar::Advance(const State& s, uint8_t c, State* out, int64_t* work) const {
  out->stacks.clear();
  if (work != nullptr) *work += int64_t(s.stacks.size());
  for (const std::vector<int32_t>& stack : s.stacks) {
    if (stack.empty()) continue;
    const int32_t e = elements_[size_t(stack.back())];
    if (!sets_[size_t(-e - 2)].Has(c)) continue;
    if (work != nullptr) *work += int64_t(stack.size());
    std::vector<int32_t> next = stack;
    ++next.back();
    Expand(next, &out->stacks);
  }
  if (work != nullptr) {
    // Making the new state: its entries, copied while expanding and
    // compared while sorting (about log2 of its stacks times each).
    int64_t entries = 0;
    for (const std::vector<int32_t>& stack : out->stacks) entries += int64_t(stack.size());
    *work += entries * int64_t(1 + std::bit_width(out->stacks.size()));
  }
  Normalize(&out->stacks);
  return !out->stacks.empty();
}

int64_t Grammar::StateSize(const State& s) {
  int64_t size = int64_t(s.stacks.size());
  for (const std::vector<int32_t>& stack : s.stacks) size += int64_t(stack.size());
  return size;
}

int64_t Grammar::MaxStateSize() { return int64_t(kMaxStacks) * int64_t(kMaxStackDepth + 1); }

int64_t Grammar::MaxAdvanceWork() {
  const int64_t entries = int64_t(kMaxStacks) * int64_t(kMaxStackDepth);
  return int64_t(kMaxStacks) + entries + entries * int64_t(1 + std::bit_width(kMaxStacks));
}

bool Grammar::Accepting(const State& s) const {
  return !s.stacks.empty() && s.stacks.front().empty();  // sorted: an empty stack comes first
}

bool Grammar::Finished(const State& s) const { return s.stacks.size() == 1 && s.stacks.front().empty(); }

int64_t Grammar::MinBytesToAccept(const State& s) const {
  int64_t best = std::numeric_limits<int64_t>::max();
  for (const std::vector<int32_t>& stack : s.stacks) {
    int64_t sum = 0;
    for (int32_t p : stack) sum += min_from_[size_t(p)];
    best = std::min(best, sum);
  }
  return best;
}

void Grammar::AppendKey(const State& s, std::vector<int32_t>* key) const {
  for (const std::vector<int32_t>& stack : s.stacks) {
    key->push_back(int32_t(stack.size()));
    key->insert(key->end(), stack.begin(), stack.end());
  }
}

}  // namespace tandem
