#include "transfer/handoff_sender.h"

#include <thread>

#include "transfer/checksum.h"

namespace tandem::transfer {

HandoffSender::HandoffSender(const Model& model, const CacheSpec& spec, ThreadPool& threads,
                             PagePool& local, SenderOptions options)
    : model_(model),
      spec_(spec),
      local_(local),
      forward_(model, spec, threads),
      options_(options),
      index_(options.prefix_cache ? std::make_unique<PrefixIndex>(local) : nullptr) {}

HandoffSender::~HandoffSender() {
  if (tiers_) {
    tiers_->Drain();
    tiers_->Poll();
  }
  if (index_) index_->SetEvictHook(nullptr);
  tiers_.reset();
  index_.reset();  // gives its pages back to the pool
}

Status HandoffSender::EnableTiers(const std::string& weights_identity) {
  if (options_.tiers.host_pages <= 0 && options_.tiers.host_bytes <= 0) return Status::Ok();
  if (!index_) return InvalidArgument("cache tiers need the prefix cache");
  TANDEM_ASSIGN_OR_RETURN(tiers_, TieredCache::Create(local_, spec_.registry, options_.tiers, weights_identity));
  index_->SetEvictHook([t = tiers_.get()](uint64_t key, uint64_t parent, std::span<const int32_t> tokens,
                                          int32_t page) { t->OnL1Evict(key, parent, tokens, page); });
  return Status::Ok();
}

bool HandoffSender::MakeRoom(int64_t n) {
  if (index_ && index_->Evict(n) > 0) return true;
  if (tiers_ && tiers_->l1_pages_held() > 0) {  // copies to L2 still hold pages
    tiers_->Drain();
    tiers_->Poll();
    return true;
  }
  return false;
}

StatusOr<int64_t> HandoffSender::TakePages(const Destination& d, int64_t n_pages) {
  const int64_t n = int64_t(d.tokens.size());
  local_pages_.clear();
  gates_.reset();
  if (tiers_) tiers_->Poll();
  if (index_) {
    PrefixIndex::Match hit = index_->Lookup(d.tokens, n - 1);
    local_pages_ = std::move(hit.pages);
  }
  const int64_t from_l1 = int64_t(local_pages_.size());
  int64_t from_l2 = 0, from_l3 = 0;
  if (tiers_) {
    TieredCache::Match m = tiers_->Lookup(d.tokens, from_l1, n - 1);
    if (m.l3_pages > 0) {
      // One worker thread: wait for the prefetch here (bounded by its deadline).
      tiers_->Unpin(m.l2_pages);
      const int64_t before = int64_t(m.l2_pages.size());
      auto p = tiers_->PrefetchFromL3(d.tokens, from_l1 + before, n - 1);
      while (!p->Ready()) std::this_thread::sleep_for(std::chrono::microseconds(200));
      m = tiers_->Lookup(d.tokens, from_l1, n - 1);
      from_l3 = std::max<int64_t>(0, int64_t(m.l2_pages.size()) - before);
    }
    const int64_t want = int64_t(m.l2_pages.size());
    gates_ = tiers_->LoadMatch(m, [&](int64_t k) { return MakeRoom(k); }, &local_pages_);
    if (!gates_) from_l3 = 0;
    from_l2 = gates_ ? want - from_l3 : 0;
    tiers_->RecordHits(from_l1 * kPageTokens, from_l2 * kPageTokens, from_l3 * kPageTokens);
  }
  const int64_t cached = int64_t(local_pages_.size());
  const int64_t need = n_pages - cached;
  while (local_.free_pages() < need && MakeRoom(need - local_.free_pages())) {
  }
  auto rest = local_.Allocate(need);
  if (!rest.ok()) {
    if (gates_) gates_->WaitAll();
    local_.Release(local_pages_);
    local_pages_.clear();
    return rest.status();
  }
  local_pages_.insert(local_pages_.end(), rest->begin(), rest->end());
  cached_tokens_ += cached * kPageTokens;
  return cached * kPageTokens;
}

// Writes layer `layer` of every registered buffer for the prompt pages that
// hold tokens [first_token, end_token) and lie past the decode side's cached
// prefix. Whole page segments are sent; rows past the prompt are don't-care.
Status HandoffSender::PutLayer(int layer, int64_t first_token, int64_t end_token,
                               const Destination& d, const RemoteKey& remote, Connection& c,
                               bool defer_index_k) {
  const CacheLayout& layout = local_.layout();
  const CacheLayout& remote_layout = *remote_layout_;
  const int64_t skip_pages = d.skip_tokens / kPageTokens;
  const int64_t first_page = std::max(first_token / kPageTokens, skip_pages);
  const int64_t end_page = (end_token + kPageTokens - 1) / kPageTokens;
  for (int64_t p = first_page; p < end_page; ++p) {
    const PageRef& dst = d.pages[size_t(p - skip_pages)];
    for (CacheBufferId b = 0; b < layout.n_buffers(); ++b) {
      if (defer_index_k && b == spec_.index_k) {
        deferred_.push_back({layer, int32_t(p)});
        continue;
      }
      const uint64_t offset = uint64_t(remote_layout.SegmentBase(b, layer)) + uint64_t(dst.page) * uint64_t(layout.page_stride(b));
      TANDEM_RETURN_IF_ERROR(c.Put(local_.Segment(b, layer, local_pages_[size_t(p)]),
                                   size_t(layout.page_stride(b)), remote, offset));
    }
  }
  return Status::Ok();
}

StatusOr<Commit> HandoffSender::Run(const Destination& d, const RemoteKey& remote,
                                    Connection& connection, Clock::time_point deadline) {
  const SamplingParams& sampling = d.sampling;
  const auto now = Clock::now();
  fenced_ = true;  // nothing posted yet
  HandoffDeadlines deadlines = options_.deadlines;
  if (deadline != Clock::time_point::max()) {
    // The destination's budget bounds the transfer too.
    deadlines.transferring = std::min(deadlines.transferring,
                                      std::chrono::duration_cast<std::chrono::milliseconds>(
                                          std::max(deadline - now, Clock::duration::zero())));
  }
  HandoffStateMachine machine(HandoffSide::kPrefill, deadlines, now);
  const int64_t n = int64_t(d.tokens.size());
  const int64_t skip_pages = d.skip_tokens / kPageTokens;
  const int64_t n_pages = (n + kPageTokens - 1) / kPageTokens;
  if (d.skip_tokens % kPageTokens != 0 || d.skip_tokens >= n || int64_t(d.pages.size()) != n_pages - skip_pages) {
    return InvalidArgument("destination does not cover the prompt: " + std::to_string(d.pages.size()) +
                           " pages for " + std::to_string(n) + " tokens after " + std::to_string(d.skip_tokens));
  }
  if (d.pool_pages < 1) return InvalidArgument("destination names no decode pool size");
  for (const PageRef& p : d.pages) {
    if (p.page >= d.pool_pages) return InvalidArgument("destination page " + std::to_string(p.page) + " is outside the decode pool");
  }
  // Segment offsets in the decode pool depend on its size, not ours.
  remote_layout_ = std::make_unique<CacheLayout>(spec_.registry, int(model_.config().n_layers), d.pool_pages);
  TANDEM_ASSIGN_OR_RETURN(const int64_t cached_tokens, TakePages(d, n_pages));
  struct Release {
    PagePool& pool;
    std::vector<int32_t>& pages;
    std::shared_ptr<LayerGates>& gates;
    ~Release() {
      if (gates) gates->WaitAll();  // nothing may land in a page after it is freed
      gates.reset();
      pool.Release(pages);
      pages.clear();
    }
  } release{local_, local_pages_, gates_};
  TANDEM_RETURN_IF_ERROR(machine.Transition(HandoffState::kTransferring, Clock::now()));
  const bool unsafe = options_.unsafe_early_commit && spec_.index_k >= 0;
  deferred_.clear();
  Status put_status = Status::Ok();
  int64_t chunk_begin = 0, chunk_end = 0;
  int64_t put_begin = 0;  // first token whose pages the layer hook sends
  forward_.SetLayerHook([&](int layer) {
    if (put_status.ok()) {
      if (gates_) gates_->Wait(layer);
      put_status = PutLayer(layer, put_begin, chunk_end, d, remote, connection, unsafe);
    }
  });
  std::vector<float> logits;
  const auto compute_start = Clock::now();
  // Cached pages the decode side lacks go out with the first chunk's layers
  // (each layer after the forward pass has read it, so past its load gate).
  for (chunk_begin = cached_tokens; chunk_begin < n; chunk_begin = chunk_end) {
    if (abort_id_.load() == d.handoff_id) break;
    if (machine.Expired(Clock::now())) break;
    chunk_end = std::min<int64_t>(n, chunk_begin + options_.chunk_size);
    put_begin = chunk_begin == cached_tokens ? 0 : chunk_begin;
    SequenceChunk chunk{std::span<const int32_t>(d.tokens).subspan(size_t(chunk_begin), size_t(chunk_end - chunk_begin)),
                        chunk_begin, local_pages_, false, gates_.get()};
    logits.clear();
    Status st = forward_.Run({&chunk, 1}, local_, &logits);
    if (st.ok()) st = put_status;
    if (!st.ok()) {
      // Our Abort frees the peer's pages: nothing of ours may still be in flight.
      forward_.SetLayerHook(nullptr);
      fenced_ = connection.Flush(std::max(machine.deadline(), Clock::now() + std::chrono::seconds(10))).ok();
      return st;
    }
  }
  forward_.SetLayerHook(nullptr);
  // Layer writes overlap the compute; what remains after it is the flush.
  const auto flush_start = Clock::now();
  // Whatever happens next, nothing may still be in flight when we return.
  // Past the deadline the flush still gets a bounded grace period: an Abort or
  // AbortAck must never overtake our own writes.
  const Status flushed = connection.Flush(std::max(machine.deadline(), Clock::now() + std::chrono::seconds(10)));
  fenced_ = flushed.ok();
  const auto flush_end = Clock::now();
  if (abort_id_.load() == d.handoff_id) {
    (void)machine.Transition(HandoffState::kAborted, Clock::now());
    return Status(StatusCode::kAborted, "handoff " + std::to_string(d.handoff_id) + " aborted by its peer");
  }
  if (machine.Expired(Clock::now())) {
    return Status(StatusCode::kDeadlineExceeded, "handoff " + std::to_string(d.handoff_id) + " ran past its deadline");
  }
  TANDEM_RETURN_IF_ERROR(flushed);
  Commit commit;
  commit.handoff_id = d.handoff_id;
  commit.pages_digest = PagesDigest(d.pages);
  commit.first_token = sampler_.Sample(logits, sampling, d.tokens, n);
  if (unsafe) {
    // The production bug: the index-K pages go out last and the commit does
    // not wait for them. Digests are computed locally, so they are right;
    // the decode side reads before the bytes land.
    const CacheLayout& layout = local_.layout();
    for (auto [layer, p] : deferred_) {
      const PageRef& dst = d.pages[size_t(p - skip_pages)];
      const uint64_t offset = uint64_t(remote_layout_->SegmentBase(spec_.index_k, layer)) +
                              uint64_t(dst.page) * uint64_t(layout.page_stride(spec_.index_k));
      TANDEM_RETURN_IF_ERROR(connection.Put(local_.Segment(spec_.index_k, layer, local_pages_[size_t(p)]),
                                            size_t(layout.page_stride(spec_.index_k)), remote, offset));
    }
  }
  commit.digests = DigestPages(local_, local_pages_, d.skip_tokens, n);
  commit.compute_us = uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(flush_start - compute_start).count());
  commit.transfer_us = uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(flush_end - flush_start).count());
  TANDEM_RETURN_IF_ERROR(connection.Send(commit.Encode()));
  TANDEM_RETURN_IF_ERROR(machine.Transition(HandoffState::kCommitted, Clock::now()));
  if (index_) {
    // The whole prompt is computed here: its full pages serve the next round.
    if (gates_) gates_->WaitAll();
    index_->Insert(d.tokens, local_pages_);
    if (tiers_) tiers_->OnL1Insert(d.tokens, local_pages_);
  }
  if (unsafe) {
    // The commit is out while these writes are in flight. The local pages
    // must stay intact until they land, so flush before releasing them.
    fenced_ = connection.Flush(Clock::now() + std::chrono::seconds(30)).ok();
  }
  return commit;
}

}  // namespace tandem::transfer
