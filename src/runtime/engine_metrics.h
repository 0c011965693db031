// The engine's Prometheus metrics. prometheus-cpp metrics are thread-safe:
// the loop thread records, the HTTP /metrics handler serializes.
#pragma once

#include <map>
#include <memory>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace tandem {

struct TierStats;

class EngineMetrics {
 private:
  // Declared first: the metric references below are built from it.
  std::shared_ptr<prometheus::Registry> registry_;

 public:
  EngineMetrics();

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }
  // Prometheus text exposition format of everything registered.
  std::string Text() const;

  // Cache-tier metrics (registered on first call, so servers without tiers
  // do not show them): hits and tokens per tier, load/store bytes, evictions,
  // load time, gate wait time, tier occupancy. Loop thread.
  void PublishTiers(const TierStats& s);

  prometheus::Gauge& running;
  prometheus::Gauge& waiting;
  prometheus::Gauge& pages_free;
  prometheus::Gauge& pages_used;
  prometheus::Gauge& pages_reserved;
  prometheus::Gauge& prefix_cached_pages;
  prometheus::Counter& prompt_tokens;
  prometheus::Counter& generated_tokens;
  prometheus::Counter& prefix_hit_tokens;
  prometheus::Counter& preemptions;
  prometheus::Counter& grammar_work;        // structured outputs: work on token masks
  prometheus::Counter& grammar_mask_waits;  // draws that waited a step for their mask
  prometheus::Counter& finished;
  prometheus::Counter& cancelled;
  prometheus::Counter& failed;
  prometheus::Histogram& ttft;
  prometheus::Histogram& inter_token;
  prometheus::Histogram& e2e;
  // Disaggregated decode only.
  prometheus::Counter& handoffs_committed;
  prometheus::Counter& handoffs_failed;
  prometheus::Counter& handoffs_aborted;
  prometheus::Counter& handoffs_verified;
  prometheus::Counter& handoff_digest_mismatches;
  prometheus::Gauge& handoffs_in_flight;
  prometheus::Gauge& handoff_quarantined_pages;
  prometheus::Histogram& handoff_page_wait;  // queued until its pages were reserved
  prometheus::Histogram& handoff_wait;       // destination sent -> commit accepted (prefill + transfer + commit)
  prometheus::Histogram& handoff_compute;    // prefill side: the prompt's forward passes (writes overlap them)
  prometheus::Histogram& handoff_transfer;   // prefill side: the flush after the last layer
  prometheus::Histogram& handoff_commit_wait;  // the rest of handoff_wait: queueing, messages, verification
  prometheus::Histogram& decode_phase;       // commit accepted -> request finished
  prometheus::Gauge& handoff_time_share;
  prometheus::Counter& handoff_seconds;          // numerator and denominator of the share, so a
  prometheus::Counter& handoff_request_seconds;  // client can take it over any interval     // handoff wait / request duration, over finished requests
  prometheus::Gauge& prefill_links_up;       // links whose handshake was accepted
  prometheus::Counter& prefill_link_reconnects;
  prometheus::Counter& prefill_links_declared_dead;  // silent past the peer timeout
  prometheus::Counter& handoff_replacements;  // requests placed again after their handoff's link or peer failed
  // tandem_handoff_bytes_total{buffer=NAME}: bytes committed handoffs brought, per cache buffer
  // (the registry's names, so the index-K share of every handoff can be read).
  prometheus::Counter& HandoffBytes(const std::string& buffer);
  prometheus::Counter& prefill_affinity_hits;  // placed where a prefix of the prompt was computed
 private:
  std::map<std::string, double> tier_seen_;  // counter values already exported
  std::map<std::string, prometheus::Counter*> tier_counters_;
  std::map<std::string, prometheus::Gauge*> tier_gauges_;
};

}  // namespace tandem
