#include "common/process_start.h"
#include "common/env.h"

#include <chrono>

namespace tandem {
namespace {

double NowUnixSeconds() {
  return std::chrono::duration<double>(Env::Default().WallNow().time_since_epoch()).count();
}

// Set while the process starts (static initialization), not at first use.
const double kProcessStart = NowUnixSeconds();

}  // namespace

double ProcessStartUnixSeconds() { return kProcessStart; }

}  // namespace tandem
