#include "runtime/engine_metrics.h"

#include <prometheus/text_serializer.h>

#include <sstream>

#include "common/process_start.h"
#include "prefix/tiers.h"

namespace tandem {
prometheus::Gauge& MetricGauge(prometheus::Registry& r, const std::string& name, const std::string& help,
                               const prometheus::Labels& labels) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r).Add(labels);
}

prometheus::Counter& MetricCounter(prometheus::Registry& r, const std::string& name, const std::string& help,
                                   const prometheus::Labels& labels) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r).Add(labels);
}

prometheus::Histogram& MetricSeconds(prometheus::Registry& r, const std::string& name, const std::string& help) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(r).Add(
      {}, prometheus::Histogram::BucketBoundaries{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                  0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120});
}

namespace {

std::shared_ptr<prometheus::Registry> NewRegistry() { return std::make_shared<prometheus::Registry>(); }
prometheus::Gauge& Gauge(prometheus::Registry& r, const std::string& name, const std::string& help,
                         const prometheus::Labels& labels = {}) {
  return MetricGauge(r, name, help, labels);
}
prometheus::Counter& Counter(prometheus::Registry& r, const std::string& name, const std::string& help,
                             const prometheus::Labels& labels = {}) {
  return MetricCounter(r, name, help, labels);
}
prometheus::Histogram& Seconds(prometheus::Registry& r, const std::string& name, const std::string& help) {
  return MetricSeconds(r, name, help);
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
      prompt_throughput(Gauge(*registry_, "tandem_prompt_tokens_per_second",
                              "Prompt tokens a second, as measured by the step-time budget (its moving average)")),
      step_prompt_budget(Gauge(*registry_, "tandem_step_prompt_budget_tokens",
                               "Prompt tokens the last step could carry beside decoding sequences (-1: unbounded)")),
      prompt_tokens(Counter(*registry_, "tandem_prompt_tokens_total", "Prompt tokens of admitted requests")),
      generated_tokens(Counter(*registry_, "tandem_generated_tokens_total", "Tokens generated")),
      prefix_hit_tokens(Counter(*registry_, "tandem_prefix_cache_hit_tokens_total",
                                "Prompt tokens served from the prefix cache")),
      preemptions(Counter(*registry_, "tandem_preemptions_total", "Sequences preempted for pages")),
      grammar_work(Counter(*registry_, "tandem_grammar_work_total",
                           "Structured outputs: grammar work on token masks (about a nanosecond a unit)")),
      grammar_mask_waits(Counter(*registry_, "tandem_grammar_mask_waits_total",
                                 "Structured outputs: tokens that waited a step for their mask (the step's grammar "
                                 "budget was spent)")),
      drafted_tokens(Counter(*registry_, "tandem_spec_drafted_tokens_total",
                             "Speculation: tokens drafted from the sequences' own context")),
      accepted_tokens(Counter(*registry_, "tandem_spec_accepted_tokens_total",
                              "Speculation: drafted tokens kept (each equal to the draw at its position)")),
      finished(Counter(*registry_, "tandem_requests_total", "Requests by outcome", {{"outcome", "finished"}})),
      cancelled(Counter(*registry_, "tandem_requests_total", "Requests by outcome", {{"outcome", "cancelled"}})),
      failed(Counter(*registry_, "tandem_requests_total", "Requests by outcome", {{"outcome", "failed"}})),
      ttft(Seconds(*registry_, "tandem_time_to_first_token_seconds", "Arrival to first token")),
      inter_token(Seconds(*registry_, "tandem_inter_token_latency_seconds", "Between streamed tokens")),
      e2e(Seconds(*registry_, "tandem_request_duration_seconds", "Arrival to last token")),
      step(Seconds(*registry_, "tandem_engine_step_seconds",
                   "One engine step (schedule, compute, draw); a step past --loop-watchdog-ms turns /health 503")) {
  Gauge(*registry_, "tandem_process_start_time_seconds", "When this process started (Unix seconds)")
      .Set(ProcessStartUnixSeconds());
}

void EngineMetrics::PublishTiers(const TierStats& s) {
  auto counter = [&](const std::string& key, const std::string& name, const std::string& help,
                     const prometheus::Labels& labels, double now) {
    auto it = tier_counters_.find(key);
    if (it == tier_counters_.end()) it = tier_counters_.emplace(key, &Counter(*registry_, name, help, labels)).first;
    double& seen = tier_seen_[key];
    if (now > seen) it->second->Increment(now - seen);
    seen = now;
  };
  auto gauge = [&](const std::string& key, const std::string& name, const std::string& help,
                   const prometheus::Labels& labels, double now) {
    auto it = tier_gauges_.find(key);
    if (it == tier_gauges_.end()) it = tier_gauges_.emplace(key, &Gauge(*registry_, name, help, labels)).first;
    it->second->Set(now);
  };
  const std::string hits = "Prompt tokens served from each cache tier";
  counter("hit_l1", "tandem_tier_hit_tokens_total", hits, {{"tier", "l1"}}, double(s.hit_tokens_l1));
  counter("hit_l2", "tandem_tier_hit_tokens_total", hits, {{"tier", "l2"}}, double(s.hit_tokens_l2));
  counter("hit_l3", "tandem_tier_hit_tokens_total", hits, {{"tier", "l3"}}, double(s.hit_tokens_l3));
  const std::string load = "Bytes copied into L1 from L2, and into L2 from L3 files";
  counter("load_l2", "tandem_tier_load_bytes_total", load, {{"from", "l2"}}, double(s.load_bytes_l2));
  counter("load_l3", "tandem_tier_load_bytes_total", load, {{"from", "l3"}}, double(s.load_bytes_l3));
  const std::string store = "Bytes written into L2 from L1, and into L3 files from L2";
  counter("store_l2", "tandem_tier_store_bytes_total", store, {{"to", "l2"}}, double(s.store_bytes_l2));
  counter("store_l3", "tandem_tier_store_bytes_total", store, {{"to", "l3"}}, double(s.store_bytes_l3));
  const std::string evicted = "Pages each lower tier evicted (LRU)";
  counter("evict_l2", "tandem_tier_evicted_pages_total", evicted, {{"tier", "l2"}}, double(s.evicted_l2));
  counter("evict_l3", "tandem_tier_evicted_pages_total", evicted, {{"tier", "l3"}}, double(s.evicted_l3));
  counter("loads", "tandem_tier_loads_total", "Layer-wise loads of a prefix into L1", {}, double(s.loads));
  counter("load_s", "tandem_tier_load_seconds_total", "Copy engine time spent on loads into L1", {}, s.load_seconds);
  counter("gate_s", "tandem_tier_gate_wait_seconds_total",
          "Time the forward pass waited on layer gates of loads in flight", {}, s.gate_wait_seconds);
  counter("prefetch", "tandem_tier_prefetches_total", "L3 -> L2 prefetches started", {}, double(s.prefetches));
  counter("prefetch_miss", "tandem_tier_prefetch_deadline_misses_total",
          "Prefetches cut short by their deadline (the rest was recomputed)", {}, double(s.prefetch_misses));
  counter("disk_err", "tandem_tier_disk_errors_total", "L3 files dropped as unreadable or corrupt", {},
          double(s.disk_errors));
  gauge("l2_used", "tandem_tier_pages", "Pages held by each lower tier", {{"tier", "l2"}}, double(s.l2_pages_used));
  gauge("l2_total", "tandem_tier_capacity_pages", "Pages each lower tier can hold", {{"tier", "l2"}},
        double(s.l2_pages_total));
  gauge("l2_pinned", "tandem_tier_pinned_pages", "L2 pages pinned by loads in flight", {}, double(s.l2_pinned));
  gauge("l3_used", "tandem_tier_pages", "Pages held by each lower tier", {{"tier", "l3"}}, double(s.l3_pages));
  gauge("l3_bytes", "tandem_tier_disk_bytes", "Bytes of L3 page files", {}, double(s.l3_bytes));
}

std::string EngineMetrics::Text() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

}  // namespace tandem
