// Running until told to stop, the same in every command: SIGTERM and SIGINT
// are blocked in the main thread before it starts any other (so every thread
// inherits the mask and none is interrupted), and the main thread takes them
// with sigwait when its work is set up. SIGPIPE is ignored: a peer that goes
// away is an error on its socket, not the end of the process.
#pragma once

#include <signal.h>

namespace tandem::node {

// Call first, before any thread starts. The set it blocked (for waits that
// must also end on a stop signal, like the launcher's).
const sigset_t& BlockStopSignals();
// Waits for SIGTERM or SIGINT; returns which.
int WaitForStopSignal();

}  // namespace tandem::node
