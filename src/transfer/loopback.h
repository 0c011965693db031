// An in-process transport: every connection lives in one LoopbackNetwork,
// whose progress thread lands Puts and delivers messages. Puts land after
// `put_latency` and messages after `message_latency`, each in posting order
// within its kind — so, exactly as on real hardware, a message can overtake
// earlier Puts unless the sender Flushes first.
#pragma once

#include <condition_variable>
#include <map>
#include <set>
#include <mutex>
#include <thread>

#include "common/mutex.h"
#include "transfer/transport.h"

namespace tandem::transfer {

struct LoopbackOptions {
  std::chrono::microseconds put_latency{0};
  std::chrono::microseconds message_latency{0};
};

class LoopbackConnection;

// Shared by every LoopbackTransport of a test or process. Thread-safe. It
// must outlive every transport and connection made on it.
class LoopbackTransport;

class LoopbackNetwork : public std::enable_shared_from_this<LoopbackNetwork> {
 public:
  explicit LoopbackNetwork(LoopbackOptions options = {});
  ~LoopbackNetwork();
  LoopbackNetwork(const LoopbackNetwork&) = delete;
  LoopbackNetwork& operator=(const LoopbackNetwork&) = delete;

  const LoopbackOptions& options() const { return options_; }

 private:
  friend class LoopbackTransport;
  friend class LoopbackConnection;
  struct Op {
    Clock::time_point ready;
    uint64_t seq = 0;
    bool is_put = false;
    std::shared_ptr<LoopbackConnection> from;  // puts: the posting side
    std::shared_ptr<LoopbackConnection> to;    // messages: the receiving side
    const void* src = nullptr;
    size_t bytes = 0;
    uint8_t* dst = nullptr;
    std::vector<uint8_t> message;
    bool close_event = false;
    Status close_status;
  };
  void Enqueue(Op op) REQUIRES(mu_);
  void Run() EXCLUDES(mu_);
  void DropPutsOf(const LoopbackConnection* a, const LoopbackConnection* b) REQUIRES(mu_);

  const LoopbackOptions options_;
  Mutex mu_;  // held while an op executes
  std::condition_variable cv_;
  std::multimap<std::pair<Clock::time_point, uint64_t>, Op> queue_ GUARDED_BY(mu_);
  uint64_t next_seq_ GUARDED_BY(mu_) = 0;
  uint64_t next_region_ GUARDED_BY(mu_) = 1;
  uint64_t next_connection_ GUARDED_BY(mu_) = 1;
  std::map<uint64_t, std::pair<uint8_t*, size_t>> regions_ GUARDED_BY(mu_);
  struct Listener {
    std::function<ConnectionHandlers(std::shared_ptr<Connection>)> on_accept;
    const LoopbackTransport* owner = nullptr;
  };
  std::map<std::string, Listener> listeners_ GUARDED_BY(mu_);
  // The transport whose connection's handler runs now (the lock is let go
  // meanwhile), or null: a transport being destroyed waits until it is not its.
  const LoopbackTransport* running_owner_ GUARDED_BY(mu_) = nullptr;
  // Transports alive, and accepts running on a connecting thread (by their
  // listener's transport): a transport being destroyed waits for its own.
  std::set<const LoopbackTransport*> transports_ GUARDED_BY(mu_);
  std::map<const LoopbackTransport*, int> accepting_ GUARDED_BY(mu_);
  std::map<uint64_t, std::shared_ptr<LoopbackConnection>> live_ GUARDED_BY(mu_);  // open connections
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

class LoopbackTransport : public Transport {
 public:
  explicit LoopbackTransport(std::shared_ptr<LoopbackNetwork> network);
  ~LoopbackTransport() override;
  std::string name() const override { return "loopback"; }
  StatusOr<Region> AllocateRegion(size_t bytes) override;
  Status Listen(const std::string& address,
                std::function<ConnectionHandlers(std::shared_ptr<Connection>)> on_accept) override;
  StatusOr<std::shared_ptr<Connection>> Connect(const std::string& address,
                                                ConnectionHandlers handlers) override;
  int listen_port() const override { return -1; }  // addresses are names, not ports
  bool close_fences_peer_writes() const override { return true; }

 private:
  std::shared_ptr<LoopbackNetwork> net_;
  std::vector<std::unique_ptr<uint8_t[]>> memory_;
  std::vector<uint64_t> region_ids_;
  std::vector<std::string> addresses_;
};

}  // namespace tandem::transfer
