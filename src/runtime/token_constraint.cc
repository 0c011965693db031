#include "runtime/token_constraint.h"

#include <algorithm>
#include <numeric>

#include "runtime/json_schema.h"

namespace tandem {
namespace {

// Bounds on what constrained requests may cost the engine loop: the bytes of
// masks and keys kept per grammar (8 MiB; a state with a key over 16 KiB is
// not kept), grammars kept, and the work one mask may take, counted in stack
// entries copied (an ambiguous or deeply nested answer keeps many long parses
// alive; past the budget the request fails rather than stall every other one).
// Whether a state passes the bound depends on the state alone, so a request
// fails or not the same way whatever the cache holds.
constexpr size_t kMaxRecentGrammars = 8;
constexpr size_t kMaxCacheBytesPerGrammar = size_t(8) << 20;
constexpr size_t kMaxKeyBytes = size_t(16) << 10;

// About 1024 stack entries looked at or copied per trie node, within
// [2^24, 2^28] (a fraction of a second on these cores).
int64_t MaxStepsPerMask(const VocabTrie& trie) {
  return std::clamp<int64_t>(1024 * int64_t(trie.nodes().size()), int64_t(1) << 24, int64_t(1) << 28);
}

void SetBit(TokenMask& mask, int32_t token) { mask[size_t(token) >> 6] |= uint64_t(1) << (token & 63); }

}  // namespace

// ---------------------------------------------------------------- trie

VocabTrie::VocabTrie(const Tokenizer& tokenizer) : vocab_size_(tokenizer.vocab_size()) {
  std::vector<std::string> bytes(static_cast<size_t>(vocab_size_), std::string());
  std::vector<int32_t> order;
  for (int32_t id = 0; id < vocab_size_; ++id) {
    if (tokenizer.IsEndOfGeneration(id)) {
      end_tokens_.push_back(id);
      continue;
    }
    const TokenType type = tokenizer.token_type(id);
    if (type != TokenType::kNormal && type != TokenType::kByte && type != TokenType::kUserDefined) continue;
    bytes[size_t(id)] = tokenizer.TokenBytes(id);
    if (!bytes[size_t(id)].empty()) order.push_back(id);
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return bytes[size_t(a)] != bytes[size_t(b)] ? bytes[size_t(a)] < bytes[size_t(b)] : a < b;
  });
  nodes_.emplace_back();
  BuildNode(0, 0, order.size(), 0, bytes, order);
}

// order[begin, end) share their first `depth` bytes; those no longer than
// that end at this node, the rest go to one child per next byte.
void VocabTrie::BuildNode(int32_t node, size_t begin, size_t end, size_t depth, const std::vector<std::string>& bytes,
                          const std::vector<int32_t>& order) {
  nodes_[size_t(node)].tokens_begin = int32_t(tokens_.size());
  while (begin < end && bytes[size_t(order[begin])].size() == depth) tokens_.push_back(order[begin++]);
  nodes_[size_t(node)].tokens_end = int32_t(tokens_.size());
  std::vector<std::pair<size_t, size_t>> groups;
  for (size_t i = begin; i < end;) {
    size_t j = i;
    const char c = bytes[size_t(order[i])][depth];
    while (j < end && bytes[size_t(order[j])][depth] == c) ++j;
    groups.push_back({i, j});
    i = j;
  }
  const int32_t first = int32_t(nodes_.size());
  nodes_[size_t(node)].children_begin = first;
  nodes_[size_t(node)].children_end = first + int32_t(groups.size());
  nodes_.resize(nodes_.size() + groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    nodes_[size_t(first) + g].byte = uint8_t(bytes[size_t(order[groups[g].first])][depth]);
    BuildNode(first + int32_t(g), groups[g].first, groups[g].second, depth + 1, bytes, order);
  }
}

// ---------------------------------------------------------------- constraint

struct TokenConstraint::Compiled {
  using Entry = MaskEntry;
  std::shared_ptr<const Grammar> grammar;
  std::vector<std::string> token_bytes;  // by id
  std::unordered_map<std::string, Entry> masks;  // by state key
  size_t bytes = 0;                              // of masks and keys
};

namespace {

// Marks every token whose bytes the grammar accepts from `state`, and that
// leaves at most `limit` bytes to finish (no limit when negative). *steps
// counts the parses advanced; the walk stops once it passes the budget.
void Walk(const Grammar& g, const VocabTrie& trie, int32_t node, const Grammar::State& state, int64_t limit,
          TokenMask& mask, int64_t& max_next, int64_t* steps, int64_t max_steps) {
  const VocabTrie::Node& n = trie.nodes()[size_t(node)];
  Grammar::State next;
  for (int32_t c = n.children_begin; c < n.children_end; ++c) {
    const VocabTrie::Node& child = trie.nodes()[size_t(c)];
    if (*steps > max_steps) return;
    if (!g.Advance(state, child.byte, &next, steps)) continue;
    if (child.tokens_begin < child.tokens_end) {
      const int64_t need = g.MinBytesToAccept(next);
      if (limit < 0 || need <= limit) {
        max_next = std::max(max_next, need);
        for (int32_t t = child.tokens_begin; t < child.tokens_end; ++t) SetBit(mask, trie.tokens()[size_t(t)]);
      }
    }
    Walk(g, trie, c, next, limit, mask, max_next, steps, max_steps);
  }
}

}  // namespace

TokenConstraint::TokenConstraint(std::shared_ptr<Compiled> compiled, const VocabTrie& trie)
    : compiled_(std::move(compiled)), trie_(trie), state_(compiled_->grammar->Start()) {}

const TokenMask& TokenConstraint::Allowed(int64_t budget) {
  const Grammar& g = *compiled_->grammar;
  const size_t words = (size_t(trie_.vocab_size()) + 63) / 64;
  int64_t steps = 0;
  const int64_t max_steps = MaxStepsPerMask(trie_);
  auto too_costly = [&]() -> const TokenMask& {
    status_ = InvalidArgument("the response format keeps too many parses open at once (over " +
                                std::to_string(max_steps) + " grammar steps for one token); simplify the schema");
    tight_.assign(words, 0);
    return tight_;
  };
  std::vector<int32_t> key_ints;
  g.AppendKey(state_, &key_ints);
  std::string key(reinterpret_cast<const char*>(key_ints.data()), key_ints.size() * sizeof(int32_t));
  auto it = compiled_->masks.find(key);
  const Compiled::Entry* entry = nullptr;
  if (it != compiled_->masks.end()) {
    entry = &it->second;
  } else {
    Compiled::Entry e;
    e.mask.assign(words, 0);
    if (!state_.empty()) Walk(g, trie_, 0, state_, -1, e.mask, e.max_next, &steps, max_steps);
    if (steps > max_steps) return too_costly();
    if (g.Accepting(state_)) {
      for (int32_t t : trie_.end_tokens()) SetBit(e.mask, t);
    }
    const size_t bytes = key.size() + words * 8;
    if (key.size() > kMaxKeyBytes) {
      uncached_ = std::move(e);  // used once
      entry = &uncached_;
    } else {
      if (compiled_->bytes + bytes > kMaxCacheBytesPerGrammar) {
        compiled_->masks.clear();
        compiled_->bytes = 0;
      }
      compiled_->bytes += bytes;
      entry = &compiled_->masks.emplace(std::move(key), std::move(e)).first->second;
    }
  }
  if (budget - 1 >= entry->max_next) return entry->mask;
  // Near the end of the budget: only tokens after which the answer can still
  // be finished.
  tight_.assign(words, 0);
  int64_t unused = 0;
  steps = 0;  // this walk's own bound: the same whether or not the full mask was cached
  if (budget >= 1 && !state_.empty()) Walk(g, trie_, 0, state_, budget - 1, tight_, unused, &steps, max_steps);
  if (steps > max_steps) return too_costly();
  if (budget >= 1 && g.Accepting(state_)) {
    for (int32_t t : trie_.end_tokens()) SetBit(tight_, t);
  }
  return tight_;
}

void TokenConstraint::Accept(int32_t token) {
  if (token < 0 || size_t(token) >= compiled_->token_bytes.size()) return;
  const std::string& bytes = compiled_->token_bytes[size_t(token)];
  Grammar::State next;
  for (char c : bytes) {
    compiled_->grammar->Advance(state_, uint8_t(c), &next);
    std::swap(state_, next);
  }
}

bool TokenConstraint::finished() const { return compiled_->grammar->Finished(state_); }

int64_t TokenConstraint::min_tokens() const {
  return state_.empty() ? -1 : compiled_->grammar->MinBytesToAccept(state_);
}

ConstraintCache::~ConstraintCache() = default;

StatusOr<std::unique_ptr<TokenConstraint>> ConstraintCache::Start(const std::string& constraint) {
  if (!trie_) trie_ = std::make_unique<VocabTrie>(tokenizer_);
  auto it = std::find_if(recent_.begin(), recent_.end(), [&](const auto& e) { return e.first == constraint; });
  if (it != recent_.end()) {
    recent_.splice(recent_.begin(), recent_, it);
  } else {
    TANDEM_ASSIGN_OR_RETURN(std::shared_ptr<const Grammar> grammar, CompileConstraint(constraint));
    auto compiled = std::make_shared<TokenConstraint::Compiled>();
    compiled->grammar = std::move(grammar);
    compiled->token_bytes.resize(size_t(tokenizer_.vocab_size()));
    for (int32_t t : trie_->tokens()) compiled->token_bytes[size_t(t)] = tokenizer_.TokenBytes(t);
    recent_.emplace_front(constraint, std::move(compiled));
    if (recent_.size() > kMaxRecentGrammars) recent_.pop_back();
  }
  return std::unique_ptr<TokenConstraint>(new TokenConstraint(recent_.front().second, *trie_));
}

}  // namespace tandem
