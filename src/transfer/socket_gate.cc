#include "transfer/socket_gate.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/env.h"
#include "transfer/socket_frame.h"

namespace tandem::transfer::socket_internal {

PendingPeers::~PendingPeers() {
  for (const auto& [fd, p] : peers_) close(fd);
}

void PendingPeers::Add(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  if (int(peers_.size()) >= gate_.max_pending) {
    // Full: the one that has waited longest goes, not the newcomer, so silent
    // connections held open cannot keep a real peer out.
    auto oldest = std::min_element(peers_.begin(), peers_.end(),
                                   [](const auto& a, const auto& b) { return a.second.deadline < b.second.deadline; });
    const int old_fd = oldest->first;
    peers_.erase(oldest);
    Refuse(old_fd, "too many connections are waiting to authenticate (" + std::to_string(gate_.max_pending) +
                       "): the longest waiting is closed");
  }
  Peer& p = peers_[fd];
  p.deadline = Env::Default().Now() + gate_.deadline;
  p.want = kFrameHeaderBytes;
}

void PendingPeers::AppendPollFds(std::vector<pollfd>* fds) const {
  for (const auto& [fd, p] : peers_) fds->push_back(pollfd{fd, POLLIN, 0});
}

bool PendingPeers::Read(int fd, Peer& p, std::string* why) {
  while (p.bytes.size() < p.want) {
    const size_t have = p.bytes.size();
    p.bytes.resize(p.want);  // at most the header, or header + max_bytes (checked below)
    const ssize_t r = recv(fd, p.bytes.data() + have, p.want - have, 0);
    p.bytes.resize(have + size_t(std::max<ssize_t>(r, 0)));
    if (r == 0) return *why = "closed before its first message", false;
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) *why = std::string("read failed: ") + std::strerror(errno);
      return false;
    }
    if (p.bytes.size() == kFrameHeaderBytes && p.want == kFrameHeaderBytes) {
      const Frame f = ParseFrameHeader(p.bytes.data());
      if (f.type != kMessageFrame) return *why = "its first frame is not a message (type " + std::to_string(f.type) + ")", false;
      if (f.length > gate_.max_bytes) {
        *why = "its first message declares " + std::to_string(f.length) + " bytes (the limit before authentication is " +
               std::to_string(gate_.max_bytes) + ")";
        return false;
      }
      p.want = kFrameHeaderBytes + size_t(f.length);
    }
  }
  return true;
}

std::vector<PendingPeers::Admitted> PendingPeers::Service(const pollfd* ready, size_t n) {
  std::vector<Admitted> admitted;
  for (size_t i = 0; i < n; ++i) {
    if (ready[i].revents == 0) continue;
    const int fd = ready[i].fd;
    auto it = peers_.find(fd);
    if (it == peers_.end()) continue;
    std::string why;
    const bool whole = Read(fd, it->second, &why);
    if (!whole) {
      if (!why.empty()) {
        peers_.erase(it);
        Refuse(fd, why);
      }
      continue;
    }
    std::vector<uint8_t> message(it->second.bytes.begin() + kFrameHeaderBytes, it->second.bytes.end());
    peers_.erase(it);
    std::vector<uint8_t> reply;
    if (gate_.check) {
      if (Status st = gate_.check(message, &reply); !st.ok()) {
        Refuse(fd, "its first message was refused: " + st.message(), reply);
        continue;
      }
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    admitted.push_back({fd, std::move(message)});
  }
  const auto now = Env::Default().Now();
  for (auto it = peers_.begin(); it != peers_.end();) {
    if (now < it->second.deadline) {
      ++it;
      continue;
    }
    const int fd = it->first;
    it = peers_.erase(it);
    Refuse(fd, "no first message within " + std::to_string(gate_.deadline.count()) + " ms");
  }
  return admitted;
}

void PendingPeers::Refuse(int fd, const std::string& why, const std::vector<uint8_t>& reply) {
  if (!reply.empty() && reply.size() <= gate_.max_bytes) {
    // One try, never blocking: a peer that does not read loses the answer.
    uint8_t header[kFrameHeaderBytes] = {};
    PutLe(header, kMessageFrame, 4);
    PutLe(header + 24, reply.size(), 8);
    if (send(fd, header, sizeof(header), MSG_NOSIGNAL | MSG_DONTWAIT) == ssize_t(sizeof(header))) {
      (void)send(fd, reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
  }
  close(fd);
  refusals_->Count(why);
}

}  // namespace tandem::transfer::socket_internal
