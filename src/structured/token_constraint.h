// From a grammar state to the tokens that may be sampled next.
//
// VocabTrie: every token's bytes in a trie, so one walk from a state visits
// each shared prefix once and drops a whole subtree at the first byte the
// grammar refuses. ConstraintCache: compiled grammars by constraint text and,
// per grammar, the allowed-token mask of every state seen (a long string or
// number revisits one state token after token, so decode pays for a walk
// only on new states). TokenConstraint: one request's position in its grammar.
//
// Finishing within the budget: each token is allowed only if the grammar can
// still be completed in the tokens left after it (every byte has a token of
// its own, so MinBytesToAccept bytes take at most that many tokens). A
// request given enough max_tokens for its schema's shortest answer therefore
// always ends in a complete answer. The mask depends on the tokens so far
// and the budget only: the same request samples the same bits anywhere.
//
// Work: a mask is a walk of the trie that advances the grammar state byte by
// byte; the walk can stop between bytes and resume, so an engine spends a
// bounded amount of grammar work per step on all its requests' masks
// (structured/grammar_budget.h) and a mask that needs more is finished in later
// steps, with the same bits.
//
// Thread safety: none; an engine's loop thread owns its cache and the
// sequences' constraints.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "model/tokenizer.h"
#include "structured/grammar.h"

namespace tandem {

class VocabTrie {
 public:
  explicit VocabTrie(const Tokenizer& tokenizer);

  struct Node {
    uint8_t byte = 0;
    int32_t children_begin = 0, children_end = 0;  // indices into nodes()
    int32_t tokens_begin = 0, tokens_end = 0;      // indices into tokens(): those whose bytes end here
  };
  const std::vector<Node>& nodes() const { return nodes_; }  // [0] is the root
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::vector<int32_t>& end_tokens() const { return end_tokens_; }  // end of generation
  int32_t vocab_size() const { return vocab_size_; }

 private:
  void BuildNode(int32_t node, size_t begin, size_t end, size_t depth,
                 const std::vector<std::string>& bytes, const std::vector<int32_t>& order);

  std::vector<Node> nodes_;
  std::vector<int32_t> tokens_;
  std::vector<int32_t> end_tokens_;
  int32_t vocab_size_ = 0;
};

// A bitset over the vocab: bit t of words[t / 64].
using TokenMask = std::vector<uint64_t>;

class ConstraintCache;

class TokenConstraint {
 public:
  ~TokenConstraint();

  // The tokens that may come next with `budget` tokens left (this one
  // included), spending at most `max_work` more units of grammar work
  // (Grammar::Advance's count, added to *work; the one advance that crosses
  // max_work finishes) on walking the vocab trie. nullptr when
  // the walk needs more: call again with the same budget and it resumes where
  // it stopped, so the mask is the same however its work was sliced. nullptr
  // also when it failed: status() says why. Empty when no token can finish
  // the answer in time. The mask stays valid until this constraint's next
  // Allowed or Accept (the cache may drop its entry meanwhile).
  //
  // A walk fails when one mask takes more than its bound (MaxWorkPerToken), a
  // function of the state alone: a request fails or not the same way however
  // its work was sliced and whatever the cache holds.
  const TokenMask* Allowed(int64_t budget, int64_t max_work, int64_t* work);
  // The same, with no bound on the slice (it runs to its end or fails).
  const TokenMask& Allowed(int64_t budget);
  const Status& status() const { return status_; }
  // Moves past a sampled token. End-of-generation tokens move nowhere.
  // *work, when given, grows by the grammar work it took (Grammar::Advance's).
  // REQUIRES: no walk under way (the mask for this position was finished).
  void Accept(int32_t token, int64_t* work = nullptr);
  // Nothing may follow: the answer is complete.
  bool finished() const;
  // The fewest tokens a complete answer still needs.
  int64_t min_tokens() const;
  // The most grammar work one token's mask may take.
  int64_t MaxWorkPerToken() const;

 private:
  friend class ConstraintCache;
  struct Compiled;
  struct Walk;
  TokenConstraint(std::shared_ptr<Compiled> compiled, const VocabTrie& trie);
  // Runs walk_ on until it ends, fails or the slice is spent.
  enum class WalkResult { kDone, kPaused, kTooCostly };
  WalkResult Continue(int64_t max_work, int64_t* work);
  const TokenMask* TooCostly();

  std::shared_ptr<Compiled> compiled_;
  const VocabTrie& trie_;
  Grammar::State state_;
  std::unique_ptr<Walk> walk_;  // the mask under way, if any
  TokenMask allowed_;  // the last mask handed out from the cache
  TokenMask tight_;    // a mask that had to respect the budget
  struct MaskEntry {
    TokenMask mask;
    int64_t max_next = 0;  // the most bytes any allowed token leaves to finish
  };
  MaskEntry uncached_;  // a state too large to keep: its mask, used once
  Status status_;
};

class ConstraintCache {
 public:
  explicit ConstraintCache(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  ~ConstraintCache();
  // The constraint at its start. Compiles the text (structured/json_schema.h)
  // unless it is one of the most recent grammars.
  StatusOr<std::unique_ptr<TokenConstraint>> Start(const std::string& constraint);

 private:
  const Tokenizer& tokenizer_;
  std::unique_ptr<VocabTrie> trie_;  // built with the first constrained request
  std::list<std::pair<std::string, std::shared_ptr<TokenConstraint::Compiled>>> recent_;  // most recent first
};

}  // namespace tandem
