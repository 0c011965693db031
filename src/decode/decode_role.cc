#include "decode/decode_role.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <iterator>

#include "common/env.h"
#include "common/log.h"
#include "model/numerics.h"
#include "runtime/engine_metrics.h"
#include "transfer/handshake.h"

namespace tandem::decode {

using Clock = std::chrono::steady_clock;

// The decode role's metrics, on the engine's registry.
struct DecodeRole::Metrics {
  explicit Metrics(prometheus::Registry& r)
      : registry(r),
        committed(MetricCounter(r, "tandem_handoffs_total", "Handoffs by outcome", {{"outcome", "committed"}})),
        failed(MetricCounter(r, "tandem_handoffs_total", "Handoffs by outcome", {{"outcome", "failed"}})),
        aborted(MetricCounter(r, "tandem_handoffs_total", "Handoffs by outcome", {{"outcome", "aborted"}})),
        verified(MetricCounter(r, "tandem_handoffs_verified_total", "Commits whose digests were checked")),
        digest_mismatches(MetricCounter(r, "tandem_handoff_digest_mismatches_total",
                                        "Commits refused because a buffer digest did not match")),
        in_flight(MetricGauge(r, "tandem_handoffs_in_flight",
                              "Handoffs begun and not yet committed, failed or acknowledged as aborted")),
        quarantined_pages(MetricGauge(r, "tandem_handoff_quarantined_pages",
                                      "Pages of aborted handoffs waiting for the sender's acknowledgement")),
        page_wait(MetricSeconds(r, "tandem_handoff_page_wait_seconds", "Arrival until pages were reserved")),
        wait(MetricSeconds(r, "tandem_handoff_wait_seconds",
                           "Destination sent until the commit was accepted (prefill compute, transfer, commit)")),
        compute(MetricSeconds(r, "tandem_handoff_prefill_compute_seconds",
                              "Prefill engine's forward passes for a handed-off prompt")),
        transfer(MetricSeconds(r, "tandem_handoff_transfer_seconds",
                               "Prefill engine's flush after the last layer (writes overlap the compute)")),
        commit_wait(MetricSeconds(r, "tandem_handoff_commit_wait_seconds",
                                  "Handoff wait not spent computing or flushing: queueing, messages, verification")),
        decode_phase(MetricSeconds(r, "tandem_decode_phase_seconds", "Commit accepted until the request finished")),
        time_share(MetricGauge(r, "tandem_handoff_time_share",
                               "Share of finished requests' time spent waiting for their handoff")),
        seconds(MetricCounter(r, "tandem_handoff_seconds_total",
                              "Time finished requests spent waiting for their handoffs (the share's numerator)")),
        request_seconds(MetricCounter(r, "tandem_handoff_request_seconds_total",
                                      "Arrival-to-finish time of finished disaggregated requests (the share's denominator)")),
        links_up(MetricGauge(r, "tandem_prefill_links_up", "Prefill engine links whose handshake was accepted")),
        reconnects(MetricCounter(r, "tandem_prefill_link_reconnects_total",
                                 "Reconnection attempts to prefill engines that went away")),
        links_declared_dead(MetricCounter(r, "tandem_prefill_links_declared_dead_total",
                                          "Prefill engine links closed because the peer was silent past the peer timeout")),
        replacements(MetricCounter(r, "tandem_handoff_replacements_total",
                                   "Requests placed on a prefill engine again after their handoff's link or peer failed")),
        affinity_hits(MetricCounter(r, "tandem_prefill_affinity_hits_total",
                                    "Handoffs placed on the prefill engine that computed a prefix of their prompt")),
        cached_hits(MetricCounter(r, "tandem_prefill_cached_placements_total",
                                  "Handoffs placed on the prefill engine whose KV events say it holds the longest "
                                  "prefix of their prompt")),
        messages(MetricCounter(r, "tandem_prefill_link_messages_total",
                               "Messages received from prefill engines (heartbeats included)")),
        local_no_link(MetricCounter(r, "tandem_local_prefills_total",
                                    "Prompts this decode server computed itself, by why",
                                    {{"reason", "no_prefill_engine"}})),
        local_resumed(MetricCounter(r, "tandem_local_prefills_total", "Prompts this decode server computed itself, by why",
                                    {{"reason", "resumed"}})),
        local_logits(MetricCounter(r, "tandem_local_prefills_total", "Prompts this decode server computed itself, by why",
                                   {{"reason", "logits_here"}})) {}

  // tandem_request_phase_seconds_total{phase=NAME}: finished requests' time
  // by phase, summing to tandem_handoff_request_seconds_total (the report's
  // time split: where a disaggregated request's time went).
  prometheus::Counter& Phase(const std::string& phase) {
    return MetricCounter(registry, "tandem_request_phase_seconds_total",
                         "Finished requests' arrival-to-finish time by phase (page_wait, prefill_queue, "
                         "prefill_compute, transfer, commit, decode, failed_attempts, local, abandoned, other: the "
                         "time between a failed attempt and the next)",
                         {{"phase", phase}});
  }

  // tandem_handoff_bytes_total{buffer=NAME}: bytes committed handoffs
  // brought, per cache buffer (the registry's names, so the index-K share of
  // every handoff can be read).
  prometheus::Counter& Bytes(const std::string& buffer) {
    return MetricCounter(registry, "tandem_handoff_bytes_total", "Bytes committed handoffs brought, by cache buffer",
                         {{"buffer", buffer}});
  }

  prometheus::Registry& registry;
  prometheus::Counter &committed, &failed, &aborted, &verified, &digest_mismatches;
  prometheus::Gauge &in_flight, &quarantined_pages;
  prometheus::Histogram &page_wait, &wait, &compute, &transfer, &commit_wait, &decode_phase;
  prometheus::Gauge& time_share;
  prometheus::Counter &seconds, &request_seconds;
  prometheus::Gauge& links_up;
  prometheus::Counter &reconnects, &links_declared_dead, &replacements, &affinity_hits, &cached_hits, &messages;
  prometheus::Counter &local_no_link, &local_resumed, &local_logits;
};

StatusOr<std::unique_ptr<DecodeRole>> DecodeRole::Connect(const Model& model, const EngineOptions& engine,
                                                          const DecodeOptions& options) {
  TANDEM_ASSIGN_OR_RETURN(PrefillLinksOptions links, LinksOptions(model, engine, options));
  return Start(options, std::move(links));
}

StatusOr<PrefillLinksOptions> DecodeRole::LinksOptions(const Model& model, const EngineOptions& engine,
                                                       const DecodeOptions& options) {
  TANDEM_ASSIGN_OR_RETURN(CacheSpec spec, MakeCacheSpec(model.config(), engine.attention));
  const CacheLayout layout(spec.registry, int(model.config().n_layers),
                           (engine.cache_tokens + kPageTokens - 1) / kPageTokens);
  PrefillLinksOptions lo;
  const std::string& list = options.prefill_addresses;
  for (size_t begin = 0; begin <= list.size();) {
    const size_t comma = std::min(list.find(',', begin), list.size());
    if (comma > begin) lo.addresses.push_back(list.substr(begin, comma - begin));
    begin = comma + 1;
  }
  lo.discovered = options.discovered;
  lo.cached = options.cached;
  lo.pool_bytes = size_t(layout.TotalBytes());
  lo.layout_fingerprint = layout.Fingerprint() + ";" + AttentionFingerprint(spec.attention);
  lo.weights_identity = WeightsIdentity(model);
  lo.numerics = ComputeNumericsIdentity(model, spec).HandshakeFingerprint();
  lo.allow_mixed_numerics = options.allow_mixed_numerics;
  lo.transport = options.transport;
  lo.make_transport = options.make_transport;
  lo.peer_timeout = options.peer_timeout;
  lo.cluster_key = options.cluster_key;
  lo.heartbeat_interval = transfer::HeartbeatInterval(options.peer_timeout);
  lo.receiver.vocab_size = model.config().vocab_size;
  lo.receiver.deadlines.waiting_for_input = options.handoff_timeout;
  lo.receiver.verify = options.verify;
  lo.env = engine.env;  // one time for the role and its engine (arrivals, deadlines, page waits)
  return lo;
}

StatusOr<std::unique_ptr<DecodeRole>> DecodeRole::Start(const DecodeOptions& options, PrefillLinksOptions links) {
  if (options.max_placements < 1) return InvalidArgument("the decode role's max_placements must be at least 1");
  links.receiver.deadlines.bootstrapping = options.page_wait;
  const Env* env = links.env;
  TANDEM_ASSIGN_OR_RETURN(auto connected, PrefillLinks::Connect(std::move(links)));
  return std::unique_ptr<DecodeRole>(new DecodeRole(options, std::move(connected), env));
}

DecodeRole::DecodeRole(DecodeOptions options, std::unique_ptr<PrefillLinks> links, const Env* env)
    : options_(std::move(options)), links_(std::move(links)), env_(env) {}

DecodeRole::~DecodeRole() = default;

void DecodeRole::Attach(RoleHost& host) {
  host_ = &host;
  metrics_ = std::make_unique<Metrics>(host.metrics_registry());
  links_->Attach(host.pool(), host.index());
  links_->SetTiers(host.tiers());
  links_up_ = links_->healthy();
}

bool DecodeRole::Healthy() const { return links_->healthy() || options_.local_prefill; }  // loop thread

std::string DecodeRole::HealthNote() const {
  if (links_up_.load()) return {};
  return options_.local_prefill ? "no prefill engine link is up: prompts are computed on this decode server"
                                : "no prefill engine link is up (--no-local-prefill)";
}

// Begins bringing the prompt's cache here. Waiting for pages has a deadline
// of its own (Bootstrapping). Computed here instead, as a colocated engine
// does: what needs logits only this engine will have (logprobs, max_tokens
// 0), an answer already begun (resumed or preempted: its tokens and grammar
// state are here), and, unless --no-local-prefill, every prompt while no
// prefill engine link is up.
StatusOr<EngineRole::Admission> DecodeRole::Admit(Sequence& seq) {
  if (seq.generated > 0) {
    if (seq.admissions == 0) metrics_->local_resumed.Increment();
    return Admission::kLocal;
  }
  if (seq.spec.logprobs >= 0 || seq.spec.max_tokens == 0) {
    if (seq.admissions == 0) metrics_->local_logits.Increment();
    return Admission::kLocal;
  }
  if (!links_->healthy()) {
    if (!options_.local_prefill) return Unavailable("no prefill engine is reachable (--no-local-prefill)");
    metrics_->local_no_link.Increment();
    return Admission::kLocal;
  }
  Handoff& h = handoffs_[&seq];
  const uint64_t id = next_handoff_++;
  Status st = links_->Start(id, seq.tokens, seq.spec.sampling, h.replaces, seq.spec.cache_salt);
  if (st.code() == StatusCode::kResourceExhausted) {
    const auto now = env_->Now();
    if (h.page_wait_since == Clock::time_point{}) h.page_wait_since = now;
    if (now - h.page_wait_since < options_.page_wait) return Admission::kWait;
    st = ResourceExhausted("no cache pages came free for this prompt within " +
                           std::to_string(options_.page_wait.count()) + " ms: " + st.message());
  }
  if (!st.ok()) return st;
  h.id = id;
  h.page_wait_since = Clock::time_point{};
  h.replaces = 0;
  ++h.placements;
  h.sent = env_->Now();
  if (h.placements == 1) {
    h.page_wait_s = SecondsBetween(seq.arrival, h.sent);
    metrics_->page_wait.Observe(h.page_wait_s);
  }
  open_[id] = &seq;
  return Admission::kHeld;
}

// Committed handoffs resume their sequences, whose first token is already
// sampled; failed ones fail their request (never serving its tokens) or are
// placed again.
void DecodeRole::Poll() {
  std::vector<Sequence*> again;
  for (PrefillLinks::Outcome& o : links_->Poll()) {
    auto it = open_.find(o.id);
    if (it == open_.end()) {
      if (o.status.ok()) host_->pool().Release(o.ready.pages);  // its request is gone
      continue;
    }
    Sequence& s = *it->second;
    open_.erase(it);
    Handoff& h = handoffs_[&s];
    h.id = 0;
    if (!o.status.ok()) {
      // Placed again: on another link, or here when none is up (local_prefill).
      if (o.retryable && h.placements < options_.max_placements && (links_->healthy() || options_.local_prefill) &&
          !s.handle->cancelled()) {
        TLOG_WARN("tandem decode: handoff %llu failed (%s): placing its request again\n", (unsigned long long)o.id,
                  o.status.message().c_str());
        h.replaces = o.id;
        h.failed_s += SecondsBetween(h.sent, env_->Now());
        metrics_->replacements.Increment();
        again.push_back(&s);
        continue;
      }
      // A handoff that failed (aborted, corrupt, refused) is this side's
      // trouble, not the request's: Unavailable (503), which a router moves,
      // where a 500 would be taken for a request that breaks servers.
      const StatusCode c = o.status.code();
      const bool server_side = c == StatusCode::kAborted || c == StatusCode::kDataLoss || c == StatusCode::kInternal ||
                               c == StatusCode::kFailedPrecondition || c == StatusCode::kPermissionDenied;
      host_->Fail(s, server_side ? Status(StatusCode::kUnavailable, o.status.message()) : o.status);
      continue;
    }
    const double wait = SecondsBetween(h.sent, env_->Now());
    const double compute = double(o.ready.compute_us) * 1e-6, transfer = double(o.ready.transfer_us) * 1e-6;
    h.seconds += wait;
    h.committed = env_->Now();
    // The peer's own measurements, bounded by the wait this side saw (another
    // process's clock, or a peer that misreports, cannot push the parts past it).
    h.queue_s = std::min(double(o.ready.queue_us) * 1e-6, wait);
    h.compute_s = std::min(compute, wait - h.queue_s);
    h.transfer_s = std::min(transfer, wait - h.queue_s - h.compute_s);
    h.commit_s = std::max(0.0, wait - h.queue_s - h.compute_s - h.transfer_s);
    metrics_->wait.Observe(wait);
    metrics_->compute.Observe(compute);
    metrics_->transfer.Observe(transfer);
    metrics_->commit_wait.Observe(std::max(0.0, wait - compute - transfer));
    host_->Resume(s, std::move(o.ready.pages), o.ready.first_token, o.ready.cached_tokens);
  }
  if (!again.empty()) host_->Requeue(again);  // to the head of the queue, in their order
  links_up_ = links_->healthy();
  ExportCounters();
}

// The links' counters -> Prometheus (counters only move forward).
void DecodeRole::ExportCounters() {
  const PrefillLinks::Counters r = links_->counters();
  auto advance = [](prometheus::Counter& c, int64_t now, int64_t& seen) {
    if (now > seen) c.Increment(double(now - seen));
    seen = now;
  };
  Metrics& m = *metrics_;
  advance(m.committed, r.committed, seen_.committed);
  advance(m.failed, r.failed, seen_.failed);
  advance(m.aborted, r.aborted, seen_.aborted);
  advance(m.verified, r.verified, seen_.verified);
  advance(m.digest_mismatches, r.digest_mismatches, seen_.digest_mismatches);
  const CacheBufferRegistry& registry = host_->cache_spec().registry;
  seen_.buffer_bytes.resize(r.buffer_bytes.size());
  for (size_t b = 0; b < r.buffer_bytes.size() && int32_t(b) < registry.size(); ++b) {
    if (r.buffer_bytes[b] > seen_.buffer_bytes[b]) {
      m.Bytes(registry.spec(int32_t(b)).name).Increment(double(r.buffer_bytes[b] - seen_.buffer_bytes[b]));
      seen_.buffer_bytes[b] = r.buffer_bytes[b];
    }
  }
  m.quarantined_pages.Set(double(r.quarantined_pages));
  m.in_flight.Set(double(r.in_flight));
  m.links_up.Set(double(r.links_up));
  advance(m.reconnects, r.reconnects, seen_.reconnects);
  advance(m.links_declared_dead, r.links_declared_dead, seen_.links_declared_dead);
  advance(m.affinity_hits, r.affinity_hits, seen_.affinity_hits);
  advance(m.cached_hits, r.cached_hits, seen_.cached_hits);
  advance(m.messages, r.messages, seen_.messages);
}

void DecodeRole::OnEnd(const Sequence& seq, FinishReason reason, const Status& error) {
  Handoff h;  // none: it ended before its first admission
  if (auto it = handoffs_.find(&seq); it != handoffs_.end()) {
    h = it->second;
    handoffs_.erase(it);
  }
  if (h.id != 0) {  // still open: nothing more of it may land
    open_.erase(h.id);
    const AbortCode code = reason != FinishReason::kError                         ? AbortCode::kCancelled
                           : error.code() == StatusCode::kDeadlineExceeded ? AbortCode::kDeadline
                                                                           : AbortCode::kFailed;
    links_->Abort(h.id, code, reason == FinishReason::kError ? error.message() : FinishReasonName(reason));
  }
  if (reason == FinishReason::kError) return;
  const auto now = env_->Now();
  const double e2e = SecondsBetween(seq.arrival, now);
  if (h.committed != Clock::time_point{}) metrics_->decode_phase.Observe(SecondsBetween(h.committed, now));
  handoff_seconds_total_ += h.seconds;
  request_seconds_total_ += e2e;
  // The phases, which add up to e2e: a request prefilled here ("local") has no handoff parts.
  const bool handed_off = h.committed != Clock::time_point{};
  const double decode = handed_off ? SecondsBetween(h.committed, now) : 0;
  const double parts[] = {h.page_wait_s, h.queue_s, h.compute_s, h.transfer_s, h.commit_s, decode, h.failed_s};
  const char* names[] = {"page_wait", "prefill_queue", "prefill_compute", "transfer", "commit", "decode", "failed_attempts"};
  double named = 0;
  for (size_t i = 0; i < std::size(parts); ++i) {
    if (parts[i] > 0) metrics_->Phase(names[i]).Increment(parts[i]);
    named += parts[i];
  }
  if (!handed_off && h.id != 0) {
    // Ended (cancelled, or its stop came) while a handoff was still open.
    metrics_->Phase("abandoned").Increment(std::max(0.0, e2e - named));
  } else if (!handed_off) {
    metrics_->Phase("local").Increment(std::max(0.0, e2e - named));
  } else if (e2e > named) {
    metrics_->Phase("other").Increment(e2e - named);  // clocks of two processes; admission after the commit
  }
  metrics_->seconds.Increment(h.seconds);
  metrics_->request_seconds.Increment(e2e);
  if (request_seconds_total_ > 0) metrics_->time_share.Set(handoff_seconds_total_ / request_seconds_total_);
}

}  // namespace tandem::decode
