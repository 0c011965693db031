#include "node/stop_signals.h"

#include <pthread.h>

namespace tandem::node {
namespace {

const sigset_t& StopSet() {
  static const sigset_t set = [] {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGTERM);
    sigaddset(&s, SIGINT);
    return s;
  }();
  return set;
}

}  // namespace

const sigset_t& BlockStopSignals() {
  pthread_sigmask(SIG_BLOCK, &StopSet(), nullptr);
  signal(SIGPIPE, SIG_IGN);
  return StopSet();
}

int WaitForStopSignal() {
  int sig = 0;
  sigwait(&StopSet(), &sig);
  return sig;
}

}  // namespace tandem::node
