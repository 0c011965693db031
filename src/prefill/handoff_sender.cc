#include "prefill/handoff_sender.h"

#include <algorithm>
#include <vector>

namespace tandem {

HandoffSender::HandoffSender(std::shared_ptr<transfer::Connection> connection, const Destination& destination,
                             const CacheBufferRegistry& registry, int n_layers)
    : connection_(std::move(connection)),
      destination_(destination),
      remote_layout_(registry, n_layers, destination.pool_pages) {}

Status HandoffSender::PutLayer(int layer, int64_t first_token, int64_t end_token, std::span<const int32_t> pages,
                               PagePool& pool) {
  const Destination& d = destination_;
  const CacheLayout& layout = pool.layout();
  // Bounded by the decode pool the destination describes (its transport
  // bounds by the region it announced too): never past it.
  const transfer::RemoteKey key{d.remote_key, uint64_t(remote_layout_.TotalBytes())};
  const int64_t skip_pages = d.skip_tokens / kPageTokens;
  const int64_t first_page = std::max(first_token / kPageTokens, skip_pages);
  const int64_t end_page = (end_token + kPageTokens - 1) / kPageTokens;
  std::vector<transfer::PutOp> ops;
  for (CacheBufferId b = 0; b < layout.n_buffers(); ++b) {
    ops.clear();
    for (int64_t p = first_page; p < end_page; ++p) {
      const PageRef& dst = d.pages[size_t(p - skip_pages)];
      ops.push_back({pool.Segment(b, layer, pages[size_t(p)]), size_t(layout.page_stride(b)),
                     uint64_t(remote_layout_.SegmentBase(b, layer)) +
                         uint64_t(dst.page) * uint64_t(remote_layout_.page_stride(b))});
    }
    if (ops.empty()) continue;
    posted_ = true;
    const size_t n = transfer::CoalescePuts(ops);  // runs of adjacent pages on both sides: one put
    TANDEM_RETURN_IF_ERROR(connection_->PutMany(std::span<const transfer::PutOp>(ops.data(), n), key));
  }
  return Status::Ok();
}

Status HandoffSender::Flush(const Env& env, transfer::Clock::time_point deadline,
                            std::chrono::milliseconds peer_timeout) {
  // The flush runs on the engine's loop: bounded by the handoff's deadline and
  // by two peer timeouts (a peer that cannot take our writes is closed by
  // then), with a floor of one second. The deadline is kept by the engine's
  // Env; the transport waits on the real clock, so it gets the time left.
  const auto now = env.Now();
  const auto until = std::max(std::min(deadline, now + 2 * peer_timeout), now + std::chrono::seconds(1));
  Status flushed = connection_->Flush(Env::Default().Now() + (until - now));
  posted_ = false;
  if (!flushed.ok()) fenced_ = false;  // final: the connection is to be closed
  return flushed;
}

}  // namespace tandem
