// Private to the UCX transport (ucx.cc): its active-message ids, its errors,
// and a region key's header with the pin that keeps a peer's shared-memory
// segment alive while UCX attaches it. Include ucx.h.
#pragma once

#include <sys/shm.h>
#include <ucp/api/ucp.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "transfer/ucx.h"

namespace tandem::transfer {
namespace ucx_detail {

constexpr unsigned kAmId = 7;
// Internal: a worker address, sent once each way when a connection opens.
// Endpoints made from a sockaddr carry only the CM device's transports (TCP
// here); one made from the peer's worker address gets every transport both
// workers share — shared memory and CMA on one host — so puts go over it.
constexpr unsigned kAddressAmId = 8;

inline Status UcxError(const std::string& what, ucs_status_t st) {
  return Unavailable(what + ": " + ucs_status_string(st));
}

// A region's remote key: UcxKeyHeader, then UCX's packed rkey.
//
// UCX 1.13 (and later) crashes inside ucp_ep_rkey_unpack when a shared-memory
// segment named by the key is already gone — its error path releases rkeys it
// never unpacked. A peer killed between sending a key and our first put is
// exactly that case. So the key also names the SysV segment behind the region
// (when it is one, and when the peer shares our IPC namespace): we attach it
// ourselves first, which both proves it exists and keeps it alive until UCX
// holds its own attachment.
using KeyHeader = UcxKeyHeader;
constexpr size_t kKeyHeaderBytes = sizeof(KeyHeader);
static_assert(kKeyHeaderBytes == 32);

// Same kernel boot and same IPC namespace: SysV ids mean the same segments.
inline uint64_t IpcIdentity() {
  static const uint64_t identity = [] {
    std::string id;
    std::ifstream boot("/proc/sys/kernel/random/boot_id");
    std::getline(boot, id);
    char ns[128] = {};
    const ssize_t n = readlink("/proc/self/ns/ipc", ns, sizeof(ns) - 1);
    if (id.empty() || n <= 0) return uint64_t{0};
    id.append(ns, size_t(n));
    return uint64_t(XXH3_64bits(id.data(), id.size())) | 1;  // never 0
  }();
  return identity;
}

// The SysV segment mapped at `address` in this process (its id is the
// mapping's inode in /proc/self/maps), or -1 when it is not one.
inline int64_t SysvSegmentAt(const void* address) {
  const auto a = reinterpret_cast<uintptr_t>(address);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string range, perms, offset, dev, path;
    uint64_t inode = 0;
    if (!(in >> range >> perms >> offset >> dev >> inode)) continue;
    std::getline(in >> std::ws, path);
    const size_t dash = range.find('-');
    if (dash == std::string::npos) continue;
    const uintptr_t lo = std::stoull(range.substr(0, dash), nullptr, 16);
    const uintptr_t hi = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (a < lo || a >= hi) continue;
    return path.rfind("/SYSV", 0) == 0 ? int64_t(inode) : -1;
  }
  return -1;
}

// Holds an attachment to a peer's SysV segment for as long as it lives.
class SegmentPin {
 public:
  static StatusOr<SegmentPin> Attach(int64_t shmid) {
    void* p = shmat(int(shmid), nullptr, SHM_RDONLY);
    if (p == reinterpret_cast<void*>(-1)) {
      return Unavailable("the peer's shared-memory segment (SysV id " + std::to_string(shmid) +
                         ") is gone: the peer has exited or freed the region (" + std::strerror(errno) + ")");
    }
    SegmentPin pin(p);
    return pin;
  }
  SegmentPin(SegmentPin&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  SegmentPin& operator=(SegmentPin&&) = delete;
  ~SegmentPin() {
    if (p_ != nullptr) shmdt(p_);
  }

 private:
  explicit SegmentPin(void* p) : p_(p) {}
  void* p_;
};

}  // namespace ucx_detail

}  // namespace tandem::transfer
