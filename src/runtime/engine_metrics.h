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

// Registers a metric on `r` (a role registers its own on the engine's
// registry, runtime/engine_role.h). Seconds: a latency histogram, 1 ms .. 120 s.
prometheus::Gauge& MetricGauge(prometheus::Registry& r, const std::string& name, const std::string& help,
                               const prometheus::Labels& labels = {});
prometheus::Counter& MetricCounter(prometheus::Registry& r, const std::string& name, const std::string& help,
                                   const prometheus::Labels& labels = {});
prometheus::Histogram& MetricSeconds(prometheus::Registry& r, const std::string& name, const std::string& help);

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
  prometheus::Gauge& prompt_throughput;     // measured prompt tokens per second (runtime/step_budget.h)
  prometheus::Gauge& step_prompt_budget;    // prompt tokens the last step could take beside decoding ones
  prometheus::Counter& prompt_tokens;
  prometheus::Counter& generated_tokens;
  prometheus::Counter& prefix_hit_tokens;
  prometheus::Counter& preemptions;
  prometheus::Counter& grammar_work;        // structured outputs: work on token masks
  prometheus::Counter& grammar_mask_waits;  // draws that waited a step for their mask
  prometheus::Counter& drafted_tokens;      // speculation: tokens drafted
  prometheus::Counter& accepted_tokens;     // and kept
  prometheus::Counter& finished;
  prometheus::Counter& cancelled;
  prometheus::Counter& failed;
  prometheus::Histogram& ttft;
  prometheus::Histogram& inter_token;
  prometheus::Histogram& e2e;
  prometheus::Histogram& step;  // one engine step: schedule, compute, draw
 private:
  std::map<std::string, double> tier_seen_;  // counter values already exported
  std::map<std::string, prometheus::Counter*> tier_counters_;
  std::map<std::string, prometheus::Gauge*> tier_gauges_;
};

}  // namespace tandem
