// Which pages of the decode pool each prefill connection may write into: the
// pages it was given in a destination, while that handoff holds them (begun,
// and not yet committed, failed, or freed from quarantine). Where this side
// does the receiving (the TCP transport), every put a peer sends is checked
// here before a byte of it lands (ConnectionHandlers::accept_put): a peer
// that has not authenticated holds no pages, so it writes nowhere; an
// authenticated one writes only into its own handoffs' pages, whole page
// segments of any registered buffer and layer.
//
// A connection's frames arrive in order, and its reader finishes a put's
// bytes before it reads the next frame; but the engine's loop acts on a
// message (a Commit, an AbortAck) a moment after the reader has passed it and
// may be reading the next put. So the reader counts the messages it delivers
// (MessageArrived), every put allowed is tagged with that count, and the loop
// ends a handoff's window with CloseIfQuiet(..., message): false when a put
// into its pages was allowed after that message — bytes the peer sent after
// saying it was done, which may still be landing. Those pages must not be
// published or freed until the connection is closed (its fence).
//
// Thread safety: every method may be called from any thread (the engine's
// loop opens and closes windows; the transport's reader threads ask).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/layout.h"
#include "common/mutex.h"

namespace tandem::transfer {

class WriteWindows {
 public:
  explicit WriteWindows(const CacheLayout& layout);

  // Handoff `handoff` of `connection` may write `pages` (until Close).
  void Open(uint64_t connection, uint64_t handoff, std::span<const int32_t> pages) EXCLUDES(mu_);
  // Its window closes (again: nothing).
  void Close(uint64_t connection, uint64_t handoff) EXCLUDES(mu_);
  // Closes it; false when a put into its pages was allowed after the
  // connection's message number `message` (MessageArrived's count) arrived.
  bool CloseIfQuiet(uint64_t connection, uint64_t handoff, uint64_t message) EXCLUDES(mu_);

  // Reader thread, before it delivers a message of `connection`: its number (1, 2, ...).
  uint64_t MessageArrived(uint64_t connection) EXCLUDES(mu_);
  // Reader thread: true when [offset, offset + bytes) of the pool's region is
  // whole page segments, every one of them in a page open to `connection`
  // (and the put is tagged with the messages delivered so far).
  bool Allows(uint64_t connection, uint64_t offset, uint64_t bytes) EXCLUDES(mu_);
  // The connection is gone: what was kept of it goes too.
  void Forget(uint64_t connection) EXCLUDES(mu_);

 private:
  struct Segment {
    uint64_t base = 0, bytes = 0, stride = 0;
  };
  struct Page {
    int open = 0;            // handoffs of the connection holding it
    uint64_t last_put = 0;   // messages delivered before the last put allowed into it
    bool put = false;        // a put was allowed into it while open
  };
  struct Peer {
    uint64_t messages = 0;
    std::map<uint64_t, std::vector<int32_t>> handoffs;
    std::unordered_map<int32_t, Page> pages;
  };
  // Closes handoff `it` of `peer`; false when a put came after `message`.
  bool CloseLocked(Peer& peer, std::map<uint64_t, std::vector<int32_t>>::iterator it, uint64_t message)
      REQUIRES(mu_);

  std::vector<Segment> segments_;  // every (buffer, layer) segment, by base; immutable
  mutable Mutex mu_;
  std::map<uint64_t, Peer> peers_ GUARDED_BY(mu_);  // by connection
};

}  // namespace tandem::transfer
