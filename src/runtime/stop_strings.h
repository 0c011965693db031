// Streams generated text while watching for stop strings: text that might be
// the start of a stop string is held back until it is known not to be.
//
// The stop strings are one Aho-Corasick automaton (invariant 10): each byte
// of text costs O(1) amortized whatever the stops are, so a request's stops
// make the per-token work no larger than the token's text. The text matched
// so far is never searched again. A request's stops are bounded in total
// bytes (kMaxStopBytes, checked where a request is read), and the automaton
// has at most one state per byte of them.
//
// The answer ends at the first byte where some stop string is complete; of
// the stops that end there, the longest (the one that began first) is cut.
// That depends only on the text, not on how it arrives in pieces.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

// The most bytes a request's stop strings may hold, all together.
inline constexpr size_t kMaxStopBytes = 8192;

class StopStringMatcher {
 public:
  // Empty strings are dropped (they would match before any text).
  explicit StopStringMatcher(std::vector<std::string> stops);

  // Adds text; returns what is now safe to emit. After a stop string is seen,
  // stopped() is true and nothing from the stop string onward is emitted.
  std::string Push(std::string_view text);
  // The held-back tail at the end of generation.
  std::string Flush();
  bool stopped() const { return stopped_; }

  // Automaton transitions taken so far (goto and failure steps): the work
  // done, for tests that bound it per byte of text.
  uint64_t steps() const { return steps_; }

 private:
  // The automaton, flat (about 20 bytes a state at most, whatever the
  // stops): state s's children are edges [first_edge_[s], first_edge_[s+1]),
  // sorted by byte. State 0 is the root.
  int32_t Child(int32_t state, unsigned char byte) const;
  int32_t Step(int32_t state, unsigned char byte);

  std::vector<int32_t> first_edge_;
  std::vector<unsigned char> edge_byte_;
  std::vector<int32_t> edge_to_;
  std::vector<int32_t> fail_;   // the longest proper suffix of the state's text that is also a state
  std::vector<int32_t> depth_;  // the state's text's length
  // The longest stop string that ends at the state, through the failure
  // links (0: none): the cut is made this many bytes back.
  std::vector<int32_t> match_;
  int32_t state_ = 0;          // the longest suffix of the text that begins a stop
  std::string pending_;        // from head_: the held-back text, the last depth_[state_] bytes
  size_t head_ = 0;
  bool stopped_ = false;
  uint64_t steps_ = 0;
};

}  // namespace tandem
