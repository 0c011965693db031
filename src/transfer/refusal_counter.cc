#include "transfer/refusal_counter.h"

#include "common/log.h"

namespace tandem::transfer {

void RefusalCounter::Count(const std::string& why) {
  const std::string kind = why.substr(0, why.find_first_of("0123456789"));
  int64_t n = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    n = ++counts_[kind];
  }
  if ((n & (n - 1)) == 0) {
    TLOG_WARN("%s transport: refused an unauthenticated connection: %s (%lld refused so far for this reason)\n",
              transport_.c_str(), why.c_str(), static_cast<long long>(n));
  }
}

std::map<std::string, int64_t> RefusalCounter::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

}  // namespace tandem::transfer
