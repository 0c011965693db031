// The TCP listener's waiting room (transfer/transport.h, FirstMessageGate):
// accepted connections that have not yet sent a first message the gate
// admits. They cost a socket and at most max_bytes of buffer each, no
// thread: the acceptor thread polls them all. A peer that sends anything but
// one message frame first, declares more than max_bytes, or says nothing
// within the deadline is refused and closed, and so is the longest waiting
// one when another arrives while max_pending wait; so is one whose message
// `check` refuses (after its reply).
//
// Thread safety: one thread (the acceptor) calls every method.
#pragma once

#include <poll.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "transfer/refusal_counter.h"
#include "transfer/transport.h"

namespace tandem::transfer::socket_internal {

class PendingPeers {
 public:
  struct Admitted {
    int fd;  // blocking again
    std::vector<uint8_t> first_message;
  };

  // Counts its refusals in `refusals`, which outlives it.
  PendingPeers(FirstMessageGate gate, RefusalCounter* refusals) : gate_(std::move(gate)), refusals_(refusals) {}
  ~PendingPeers();
  PendingPeers(const PendingPeers&) = delete;
  PendingPeers& operator=(const PendingPeers&) = delete;

  // Takes an accepted socket (made non-blocking here); refused at once when full.
  void Add(int fd);
  // The sockets to poll for input, appended.
  void AppendPollFds(std::vector<pollfd>* fds) const;
  // Reads what arrived on `ready` (their revents set by poll), ends the ones
  // past a limit, and returns those admitted.
  std::vector<Admitted> Service(const pollfd* ready, size_t n);

 private:
  struct Peer {
    std::chrono::steady_clock::time_point deadline;
    std::vector<uint8_t> bytes;  // the header, then the message as it arrives
    size_t want = 0;             // bytes expected in all (header + message)
  };
  // Reads what is there; true once the whole first message has arrived.
  // `why` is set when the peer is to be refused.
  bool Read(int fd, Peer& p, std::string* why);
  void Refuse(int fd, const std::string& why, const std::vector<uint8_t>& reply = {});

  FirstMessageGate gate_;
  std::map<int, Peer> peers_;  // by socket
  RefusalCounter* refusals_;
};

}  // namespace tandem::transfer::socket_internal
