// Streams generated text while watching for stop strings: text that might be
// the start of a stop string is held back until it is known not to be.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tandem {

class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);

  // Adds text; returns what is now safe to emit. After a stop string is seen,
  // stopped() is true and nothing from the stop string onward is emitted.
  std::string Push(std::string_view text);
  // The held-back tail at the end of generation.
  std::string Flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace tandem
