// A context-free grammar over bytes and the parse states that constrain
// sampling to it (structured outputs). structured/json_schema.h compiles JSON
// schemas into one; structured/token_constraint.h turns a state into the set of
// tokens that may come next.
//
// A state is every way the bytes so far can continue: a set of stacks of
// positions in the flattened rules, each stack's top a byte set to match
// next (an empty stack has matched the whole grammar). It is a pure function
// of the bytes, so a request's allowed tokens depend only on its own tokens
// (invariant 5), alone or batched, colocated or disaggregated.
//
// Thread safety: a built Grammar is immutable; any number of threads may use
// one. States are values.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tandem {

class ByteSet {
 public:
  ByteSet& Add(uint8_t lo, uint8_t hi);
  ByteSet& Add(uint8_t c) { return Add(c, c); }
  bool Has(uint8_t c) const { return (bits_[c >> 6] >> (c & 63)) & 1; }
  bool operator==(const ByteSet&) const = default;

 private:
  std::array<uint64_t, 4> bits_{};
};

class Grammar {
 public:
  // Sorted, duplicate-free stacks (bottom first) of element positions.
  struct State {
    std::vector<std::vector<int32_t>> stacks;
    bool empty() const { return stacks.empty(); }
    bool operator==(const State&) const = default;
  };

  State Start() const;
  // The state after byte c; false (and *out empty) if c cannot come next.
  // *work, when given, grows by what it cost: the stacks looked at, the
  // entries copied, and the new state's entries times log2 of its stacks
  // (expanding and sorting it), so work follows time.
  bool Advance(const State& s, uint8_t c, State* out, int64_t* work = nullptr) const;
  // What reading s costs (MinBytesToAccept, AppendKey): its stacks and entries.
  static int64_t StateSize(const State& s);
  // The most work one Advance can count, and the largest StateSize (a state's
  // stacks and their depth are capped).
  static int64_t MaxAdvanceWork();
  static int64_t MaxStateSize();
  // The whole input so far is a sentence of the grammar.
  bool Accepting(const State& s) const;
  // Accepting, and no byte can follow.
  bool Finished(const State& s) const;
  // The fewest bytes that complete a sentence from s (0 when accepting).
  int64_t MinBytesToAccept(const State& s) const;
  // Appends a key that identifies s (for caches).
  void AppendKey(const State& s, std::vector<int32_t>* key) const;

  size_t elements() const { return elements_.size(); }

 private:
  friend class GrammarBuilder;
  static constexpr int32_t kEnd = -1;  // elements: >= 0 a rule, kEnd, <= -2 byte set -(e + 2)
  void Expand(std::vector<int32_t>& stack, std::vector<std::vector<int32_t>>* out) const;
  void Normalize(std::vector<std::vector<int32_t>>* stacks) const;

  std::vector<int32_t> elements_;
  std::vector<std::vector<int32_t>> rule_alternatives_;  // start positions
  std::vector<ByteSet> sets_;
  std::vector<int32_t> min_from_;  // fewest bytes from a position to its alternative's end
  int32_t root_ = 0;
};

// Builds a Grammar. Symbols: >= 0 a rule (from Rule()), < 0 a byte set (from
// Set()/Byte()). Every rule must be able to finish, and no rule may reach
// itself before matching a byte (left recursion): Build refuses both.
class GrammarBuilder {
 public:
  using Sequence = std::vector<int32_t>;

  int32_t Rule();
  void Alternative(int32_t rule, Sequence symbols);
  int32_t Set(const ByteSet& set);
  int32_t Byte(uint8_t c) { return Set(ByteSet().Add(c)); }
  // Appends one symbol per byte of `text`.
  void Literal(Sequence& seq, std::string_view text);
  size_t size() const { return symbols_; }

  StatusOr<std::shared_ptr<const Grammar>> Build(int32_t root) &&;

 private:
  std::vector<std::vector<Sequence>> rules_;
  std::vector<ByteSet> sets_;
  size_t symbols_ = 0;
};

}  // namespace tandem
