#include "structured/token_constraint.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "structured/json_schema.h"

namespace tandem {
namespace {

// Bounds on what constrained requests may cost the engine loop: the bytes of
// masks and keys kept per grammar (8 MiB; a state with a key over 16 KiB is
// not kept), grammars kept, and the work one mask may take, counted as
// Grammar::Advance counts it (an ambiguous or deeply nested answer keeps many
// long parses alive; past the bound the request fails rather than hold a
// place in every step for seconds of work per token).
// Whether a state passes the bound depends on the state alone, so a request
// fails or not the same way whatever the cache holds.
constexpr size_t kMaxRecentGrammars = 8;
constexpr size_t kMaxCacheBytesPerGrammar = size_t(8) << 20;
constexpr size_t kMaxKeyBytes = size_t(16) << 10;

// About 256 units of Grammar::Advance's work per trie node (a walk of the
// whole trie from a state of a dozen small parses), within [2^24, 2^28]:
// about 15 ms to 0.25 s on these cores, where a unit is about a nanosecond.
int64_t MaxStepsPerMask(const VocabTrie& trie) {
  return std::clamp<int64_t>(256 * int64_t(trie.nodes().size()), int64_t(1) << 24, int64_t(1) << 28);
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

// A depth-first walk of the trie from one state that marks every token whose
// bytes the grammar accepts and that leaves at most `limit` bytes to finish
// (no limit when negative). Its frames are the recursion's: it can stop
// before any advance and resume there, visiting what the unbroken walk would.
struct TokenConstraint::Walk {
  struct Frame {
    int32_t node = 0;
    int32_t next_child = 0;  // the next child to advance into
    Grammar::State state;    // after the bytes from the root to `node`
  };
  bool full = true;  // the state's whole mask (cached under `key`), else one for `limit`
  int64_t limit = -1;
  std::string key;
  MaskEntry result;
  int64_t work = 0;  // every slice's together, against MaxWorkPerToken
  std::vector<Frame> frames;
};

TokenConstraint::TokenConstraint(std::shared_ptr<Compiled> compiled, const VocabTrie& trie)
    : compiled_(std::move(compiled)), trie_(trie), state_(compiled_->grammar->Start()) {}

TokenConstraint::~TokenConstraint() = default;

int64_t TokenConstraint::MaxWorkPerToken() const { return MaxStepsPerMask(trie_); }

TokenConstraint::WalkResult TokenConstraint::Continue(int64_t max_work, int64_t* work) {
  const Grammar& g = *compiled_->grammar;
  const std::vector<VocabTrie::Node>& nodes = trie_.nodes();
  const int64_t bound = MaxWorkPerToken();
  Walk& w = *walk_;
  int64_t spent = 0;
  Grammar::State next;
  while (!w.frames.empty()) {
    Walk::Frame& f = w.frames.back();
    if (f.next_child == nodes[size_t(f.node)].children_end) {
      w.frames.pop_back();
      continue;
    }
    if (w.work > bound) break;  // no advance once past the bound: the request fails
    if (spent >= max_work) {  // this slice is spent (by at most the one advance that crossed it)
      *work += spent;
      return WalkResult::kPaused;
    }
    const int32_t c = f.next_child++;
    const VocabTrie::Node& child = nodes[size_t(c)];
    const int64_t before = w.work;
    const bool accepted = g.Advance(f.state, child.byte, &next, &w.work);
    spent += w.work - before;
    if (!accepted) continue;
    if (child.tokens_begin < child.tokens_end) {
      const int64_t need = g.MinBytesToAccept(next);
      const int64_t read = Grammar::StateSize(next);
      w.work += read;
      spent += read;
      if (w.limit < 0 || need <= w.limit) {
        w.result.max_next = std::max(w.result.max_next, need);
        for (int32_t t = child.tokens_begin; t < child.tokens_end; ++t) SetBit(w.result.mask, trie_.tokens()[size_t(t)]);
      }
    }
    w.frames.push_back({c, child.children_begin, std::move(next)});  // f is stale from here
    next = Grammar::State();
  }
  *work += spent;
  return w.work > bound ? WalkResult::kTooCostly : WalkResult::kDone;
}

const TokenMask* TokenConstraint::TooCostly() {
  status_ = InvalidArgument("the structured-output grammar exceeded its per-step work budget: choosing one token took "
                            "over " + std::to_string(MaxWorkPerToken()) +
                            " units of grammar work (the response format keeps too many parses open at once); "
                            "simplify the schema");
  walk_.reset();
  return nullptr;
}

const TokenMask* TokenConstraint::Allowed(int64_t budget, int64_t max_work, int64_t* work) {
  if (!status_.ok()) return nullptr;
  const Grammar& g = *compiled_->grammar;
  const size_t words = (size_t(trie_.vocab_size()) + 63) / 64;
  const int64_t work_at_start = *work;
  auto start_walk = [&](bool full, int64_t limit) {
    walk_ = std::make_unique<Walk>();
    walk_->full = full;
    walk_->limit = limit;
    walk_->result.mask.assign(words, 0);
    if (!state_.empty()) {
      walk_->frames.push_back({0, trie_.nodes()[0].children_begin, state_});
    }
  };
  if (!walk_ || walk_->full) {
    // The state's whole mask: cached, finished by another request meanwhile
    // (the same bits: a mask is a function of the state), or walked here.
    const Compiled::Entry* entry = nullptr;
    std::string fresh_key;
    if (!walk_) {
      std::vector<int32_t> key_ints;
      g.AppendKey(state_, &key_ints);
      fresh_key.assign(reinterpret_cast<const char*>(key_ints.data()), key_ints.size() * sizeof(int32_t));
    }
    if (auto it = compiled_->masks.find(walk_ ? walk_->key : fresh_key); it != compiled_->masks.end()) {
      walk_.reset();
      entry = &it->second;
    } else {
      if (!walk_) {
        start_walk(true, -1);
        walk_->key = std::move(fresh_key);
      }
      switch (Continue(max_work, work)) {
        case WalkResult::kPaused: return nullptr;
        case WalkResult::kTooCostly: return TooCostly();
        case WalkResult::kDone: break;
      }
      std::string key = std::move(walk_->key);
      Compiled::Entry e = std::move(walk_->result);
      walk_.reset();
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
    if (budget - 1 >= entry->max_next) {
      // A copy: the cache may drop the entry when another request's mask is added.
      allowed_ = entry->mask;
      return &allowed_;
    }
    // Near the end of the budget: only tokens after which the answer can
    // still be finished, by a walk with its own bound (the same whether or
    // not the whole mask was cached).
    if (budget < 1) {
      tight_.assign(words, 0);
      return &tight_;
    }
    start_walk(false, budget - 1);
  }
  switch (Continue(max_work - (*work - work_at_start), work)) {
    case WalkResult::kPaused: return nullptr;
    case WalkResult::kTooCostly: return TooCostly();
    case WalkResult::kDone: break;
  }
  tight_ = std::move(walk_->result.mask);
  walk_.reset();
  if (g.Accepting(state_)) {
    for (int32_t t : trie_.end_tokens()) SetBit(tight_, t);
  }
  return &tight_;
}

const TokenMask& TokenConstraint::Allowed(int64_t budget) {
  int64_t work = 0;
  if (const TokenMask* mask = Allowed(budget, std::numeric_limits<int64_t>::max(), &work)) return *mask;
  tight_.assign((size_t(trie_.vocab_size()) + 63) / 64, 0);  // failed: status() says why
  return tight_;
}

void TokenConstraint::Accept(int32_t token, int64_t* work) {
  walk_.reset();  // a mask under way was for the position this token fills
  if (token < 0 || size_t(token) >= compiled_->token_bytes.size()) return;
  const std::string& bytes = compiled_->token_bytes[size_t(token)];
  Grammar::State next;
  for (char c : bytes) {
    compiled_->grammar->Advance(state_, uint8_t(c), &next, work);
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
