// cpp-httplib as packaged by Debian (0.11) listens with a backlog of 5, baked
// into the compiled library. Under a burst of connections (32 streaming
// clients arriving at once) the accept queue overflows and some connections
// die without a response. Calling listen() again on the bound socket raises
// the backlog; this finds the socket by its port.
#pragma once

#include <chrono>
#include <thread>

#include "server/httplib_fwd.h"

namespace tandem {

// Re-listens the listening TCP socket of this process bound to `port` with a
// large backlog. Returns false if no such socket was found.
bool RaiseListenBacklog(int port);

// Runs server.listen_after_bind() on *listener and returns once it accepts.
// cpp-httplib's stop() before the listen loop runs is lost (the loop then
// never returns, and a SIGTERM right after start hung the process), so no
// caller may stop it earlier. False: it did not start within `deadline`.
bool StartListening(httplib::Server& server, std::thread* listener, std::chrono::milliseconds deadline);

}  // namespace tandem
