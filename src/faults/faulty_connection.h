// TESTS ONLY (the fault library, linked by bin/ and tests): a fault-injecting
// wrapper around any Connection: delayed puts,
// dropped / duplicated / reordered messages, bit flips in written data, and
// peer death after a number of puts. Faults are drawn from a seeded counter,
// so a failing test replays exactly.
//
// Delayed puts are posted to the wrapped connection by the wrapper's own
// thread when their delay expires; Flush first waits for them to be posted,
// so a sender that flushes is still correct, and one that does not is caught.
//
// Unflushed sources reproduce the production incident at the transport: puts
// whose source lies in those memory ranges (the index-K segments of the
// sender's pool, say) are copied and held until the next Commit has gone
// out, then land put_delay later (20 ms when 0); no Flush waits for them, so
// the Commit, sent after a "successful" flush, overtakes them.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "common/mutex.h"
#include "transfer/transport.h"

namespace tandem::faults {

using transfer::Clock;
using transfer::Connection;
using transfer::RemoteKey;
using transfer::PutOp;


struct FaultPlan {
  std::chrono::microseconds put_delay{0};
  double drop_message_rate = 0;       // messages silently lost
  double duplicate_message_rate = 0;  // messages sent twice
  bool reorder_messages = false;      // each message swaps places with the next one
  double bit_flip_rate = 0;           // puts whose data has one bit flipped on the way
  int64_t die_after_puts = -1;        // close the connection at this put (-1: never)
  int64_t drop_messages_after = -1;   // send nothing after this many messages (-1: never),
                                      // counted from the first Hello this side sends (a
                                      // heartbeat before it, to a peer not yet answered,
                                      // passes uncounted): a wedged peer that stays connected
  bool flush_never_confirms = false;  // every Flush times out at once: the sender cannot
                                      // prove its writes landed
  // Puts from these ranges land after the next Commit (+ put_delay), uncovered by any Flush.
  std::vector<std::pair<const uint8_t*, size_t>> unflushed_sources;
  uint64_t seed = 1;
};

class FaultyConnection : public Connection {
 public:
  FaultyConnection(std::shared_ptr<Connection> inner, FaultPlan plan);
  ~FaultyConnection() override;

  uint64_t id() const override { return inner_->id(); }
  Status Put(const void* src, size_t bytes, const RemoteKey& key, uint64_t offset) override;
  Status Flush(Clock::time_point deadline) override;
  Status Send(std::vector<uint8_t> message) override;
  bool alive() const override { return inner_->alive(); }
  void Close() override;
  bool WaitReleased(Clock::time_point deadline) override { return inner_->WaitReleased(deadline); }

  int64_t flipped_puts() const;  // how many puts were corrupted so far

 private:
  struct DelayedPut {
    Clock::time_point ready;
    const void* src;
    size_t bytes;
    RemoteKey key;
    uint64_t offset;
    std::shared_ptr<std::vector<uint8_t>> owned;  // an unflushed put's own copy of its bytes
  };
  bool Draw(double rate) REQUIRES(mu_);
  void RunDelayed() EXCLUDES(mu_);
  bool Unflushed(const void* src) const;
  void ReleaseLatePuts() EXCLUDES(mu_);  // a Commit went out: the held unflushed puts land put_delay later

  std::shared_ptr<Connection> inner_;
  const FaultPlan plan_;
  mutable Mutex mu_;
  std::condition_variable cv_;
  uint64_t draws_ GUARDED_BY(mu_) = 0;
  int64_t puts_ GUARDED_BY(mu_) = 0;
  int64_t flipped_ GUARDED_BY(mu_) = 0;
  int64_t messages_sent_ GUARDED_BY(mu_) = 0;  // since our Hello
  bool hello_sent_ GUARDED_BY(mu_) = false;
  std::deque<DelayedPut> delayed_ GUARDED_BY(mu_);
  std::deque<DelayedPut> late_ GUARDED_BY(mu_);  // unflushed puts, not waited for
  // Copies of unflushed puts already posted, freed by the next flush that covers them.
  std::deque<std::shared_ptr<std::vector<uint8_t>>> posted_copies_ GUARDED_BY(mu_);
  uint64_t clears_ GUARDED_BY(mu_) = 0;  // times Close() emptied delayed_
  std::deque<std::vector<uint8_t>> corrupted_ GUARDED_BY(mu_);  // flipped copies; live as long as this
  std::vector<uint8_t> held_message_ GUARDED_BY(mu_);           // reorder: waiting for the next one
  bool holding_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  Status delayed_error_ GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace tandem::faults
