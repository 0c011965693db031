#include "runtime/engine_metrics.h"

#include <prometheus/text_serializer.h>

#include <sstream>

namespace tandem {
namespace {

std::shared_ptr<prometheus::Registry> NewRegistry() { return std::make_shared<prometheus::Registry>(); }

prometheus::Gauge& Gauge(prometheus::Registry& r, const std::string& name, const std::string& help,
                         const prometheus::Labels& labels = {}) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r).Add(labels);
}

prometheus::Counter& Counter(prometheus::Registry& r, const std::string& name,
                             const std::string& help, const prometheus::Labels& labels = {}) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r).Add(labels);
}

prometheus::Histogram& Seconds(prometheus::Registry& r, const std::string& name,
                               const std::string& help) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(r).Add(
      {}, prometheus::Histogram::BucketBoundaries{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                  0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120});
}

}  // namespace

EngineMetrics::EngineMetrics()
    : registry_(NewRegistry()),
      running(Gauge(*registry_, "tandem_requests_running", "Requests being computed")),
      waiting(Gauge(*registry_, "tandem_requests_waiting", "Requests queued for admission")),
      pages_free(Gauge(*registry_, "tandem_cache_pages", "Cache pages by state", {{"state", "free"}})),
      pages_used(Gauge(*registry_, "tandem_cache_pages", "Cache pages by state", {{"state", "used"}})),
      pages_reserved(Gauge(*registry_, "tandem_cache_pages", "Cache pages by state", {{"state", "reserved"}})),
      prefix_cached_pages(Gauge(*registry_, "tandem_prefix_cache_pages", "Pages held by the prefix index")),
      prompt_tokens(Counter(*registry_, "tandem_prompt_tokens_total", "Prompt tokens of admitted requests")),
      generated_tokens(Counter(*registry_, "tandem_generated_tokens_total", "Tokens generated")),
      prefix_hit_tokens(Counter(*registry_, "tandem_prefix_cache_hit_tokens_total",
                                "Prompt tokens served from the prefix cache")),
      preemptions(Counter(*registry_, "tandem_preemptions_total", "Sequences preempted for pages")),
      finished(Counter(*registry_, "tandem_requests_total", "Requests by outcome", {{"outcome", "finished"}})),
      cancelled(Counter(*registry_, "tandem_requests_total", "Requests by outcome", {{"outcome", "cancelled"}})),
      failed(Counter(*registry_, "tandem_requests_total", "Requests by outcome", {{"outcome", "failed"}})),
      ttft(Seconds(*registry_, "tandem_time_to_first_token_seconds", "Arrival to first token")),
      inter_token(Seconds(*registry_, "tandem_inter_token_latency_seconds", "Between streamed tokens")),
      e2e(Seconds(*registry_, "tandem_request_duration_seconds", "Arrival to last token")),
      handoffs_committed(Counter(*registry_, "tandem_handoffs_total", "Handoffs by outcome", {{"outcome", "committed"}})),
      handoffs_failed(Counter(*registry_, "tandem_handoffs_total", "Handoffs by outcome", {{"outcome", "failed"}})),
      handoffs_aborted(Counter(*registry_, "tandem_handoffs_total", "Handoffs by outcome", {{"outcome", "aborted"}})),
      handoffs_verified(Counter(*registry_, "tandem_handoffs_verified_total", "Commits whose digests were checked")),
      handoff_digest_mismatches(Counter(*registry_, "tandem_handoff_digest_mismatches_total",
                                        "Commits refused because a buffer digest did not match")),
      handoffs_in_flight(Gauge(*registry_, "tandem_handoffs_in_flight",
                               "Handoffs begun and not yet committed, failed or acknowledged as aborted")),
      handoff_quarantined_pages(Gauge(*registry_, "tandem_handoff_quarantined_pages",
                                      "Pages of aborted handoffs waiting for the sender's acknowledgement")),
      handoff_page_wait(Seconds(*registry_, "tandem_handoff_page_wait_seconds", "Arrival until pages were reserved")),
      handoff_wait(Seconds(*registry_, "tandem_handoff_wait_seconds",
                           "Destination sent until the commit was accepted (prefill compute, transfer, commit)")),
      handoff_compute(Seconds(*registry_, "tandem_handoff_prefill_compute_seconds",
                              "Prefill engine's forward passes for a handed-off prompt")),
      handoff_transfer(Seconds(*registry_, "tandem_handoff_transfer_seconds",
                               "Prefill engine's flush after the last layer (writes overlap the compute)")),
      handoff_commit_wait(Seconds(*registry_, "tandem_handoff_commit_wait_seconds",
                                  "Handoff wait not spent computing or flushing: queueing, messages, verification")),
      decode_phase(Seconds(*registry_, "tandem_decode_phase_seconds", "Commit accepted until the request finished")),
      handoff_time_share(Gauge(*registry_, "tandem_handoff_time_share",
                               "Share of finished requests' time spent waiting for their handoff")) {}

std::string EngineMetrics::Text() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

}  // namespace tandem
