#include "transfer/refusal_counter.h"

#include "common/log.h"

namespace tandem::transfer {

namespace {

// A reason may quote what a peer sent: printable ASCII only, and short.
std::string Printable(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 200)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out;
}

}  // namespace

void RefusalCounter::Count(const std::string& why) {
  std::string kind = Printable(why.substr(0, why.find_first_of("0123456789")));
  int64_t n = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Kinds a peer's text can multiply are bounded: past kMaxKinds, one "other".
    if (!counts_.count(kind) && counts_.size() >= kMaxKinds) kind = "other";
    n = ++counts_[kind];
  }
  if ((n & (n - 1)) == 0) {
    TLOG_WARN("%s transport: refused an unauthenticated connection: %s (%lld refused so far for this reason)\n",
              transport_.c_str(), Printable(why).c_str(), static_cast<long long>(n));
  }
}

std::map<std::string, int64_t> RefusalCounter::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

}  // namespace tandem::transfer
