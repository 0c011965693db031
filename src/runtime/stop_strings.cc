#include "runtime/stop_strings.h"

#include <algorithm>
#include <deque>

namespace tandem {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) {
  // The trie of every stop string, built with a list of children per state,
  // then laid out flat.
  std::vector<std::vector<std::pair<unsigned char, int32_t>>> next(1);
  depth_.push_back(0);
  match_.push_back(0);
  for (const std::string& s : stops) {
    if (s.empty()) continue;
    int32_t at = 0;
    for (char c : s) {
      const auto byte = static_cast<unsigned char>(c);
      auto& children = next[size_t(at)];
      auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(byte, int32_t(0)));
      if (it == children.end() || it->first != byte) {
        const auto child = int32_t(next.size());
        it = children.insert(it, {byte, child});
        next.emplace_back();
        depth_.push_back(depth_[size_t(at)] + 1);
        match_.push_back(0);
      }
      at = it->second;
    }
    match_[size_t(at)] = depth_[size_t(at)];
  }
  first_edge_.reserve(next.size() + 1);
  for (const auto& children : next) {
    first_edge_.push_back(int32_t(edge_to_.size()));
    for (const auto& [byte, child] : children) {
      edge_byte_.push_back(byte);
      edge_to_.push_back(child);
    }
  }
  first_edge_.push_back(int32_t(edge_to_.size()));
  // Failure links, breadth first: a state's link is the longest proper suffix
  // of its text that is also in the trie.
  fail_.assign(next.size(), 0);
  std::deque<int32_t> queue;
  for (const auto& [byte, child] : next[0]) queue.push_back(child);
  while (!queue.empty()) {
    const int32_t s = queue.front();
    queue.pop_front();
    for (const auto& [byte, child] : next[size_t(s)]) {
      int32_t f = fail_[size_t(s)];
      while (f != 0 && Child(f, byte) == 0) f = fail_[size_t(f)];
      const int32_t link = Child(f, byte);
      fail_[size_t(child)] = link == child ? 0 : link;
      match_[size_t(child)] = std::max(match_[size_t(child)], match_[size_t(fail_[size_t(child)])]);
      queue.push_back(child);
    }
  }
}

int32_t StopStringMatcher::Child(int32_t state, unsigned char byte) const {
  const auto begin = edge_byte_.begin() + first_edge_[size_t(state)];
  const auto end = edge_byte_.begin() + first_edge_[size_t(state) + 1];
  const auto it = std::lower_bound(begin, end, byte);
  return it != end && *it == byte ? edge_to_[size_t(it - edge_byte_.begin())] : 0;
}

int32_t StopStringMatcher::Step(int32_t state, unsigned char byte) {
  for (;;) {
    ++steps_;
    if (const int32_t child = Child(state, byte); child != 0) return child;
    if (state == 0) return 0;
    state = fail_[size_t(state)];
  }
}

std::string StopStringMatcher::Push(std::string_view text) {
  if (stopped_) return {};
  std::string out;
  // The text not yet emitted is pending_[head_, end) followed by `text`;
  // `emit` of its bytes go out, from the front.
  auto take = [&](size_t emit) {
    const size_t from_pending = std::min(emit, pending_.size() - head_);
    out.append(pending_, head_, from_pending);
    head_ += from_pending;
    out.append(text.substr(0, emit - from_pending));
    return emit - from_pending;  // the bytes of `text` emitted
  };
  for (size_t i = 0; i < text.size(); ++i) {
    state_ = Step(state_, static_cast<unsigned char>(text[i]));
    if (const int32_t match = match_[size_t(state_)]; match > 0) {
      stopped_ = true;
      text = text.substr(0, i + 1);
      take(pending_.size() - head_ + text.size() - size_t(match));
      pending_.clear();
      head_ = 0;
      return out;
    }
  }
  // Only the text the state stands for (its last `depth` bytes) can still
  // begin a stop string: the rest goes out.
  const size_t held = size_t(depth_[size_t(state_)]);
  const size_t from_text = take(pending_.size() - head_ + text.size() - held);
  pending_.append(text.substr(from_text));
  if (head_ > pending_.size() / 2) {  // amortized: each byte is moved at most once more
    pending_.erase(0, head_);
    head_ = 0;
  }
  return out;
}

std::string StopStringMatcher::Flush() {
  std::string out;
  if (!stopped_) out = pending_.substr(head_);
  pending_.clear();
  head_ = 0;
  state_ = 0;
  return out;
}

}  // namespace tandem
