// The decode role (runtime/engine_role.h): a request's prompt is computed by
// a prefill engine and its cache lands in this engine's pool, which lives in
// memory the prefill engines may write (decode/prefill_links.h); the request
// then runs on here from its first token, sampled there.
//
// What the role adds at the engine's seams:
//  - Admit: reserves the prompt's pages and sends its destination to a
//    prefill engine (kHeld); no pages yet: kWait, up to the Bootstrapping
//    deadline (transfer/handoff_state.h), then an error that names the wait.
//    kLocal (computed here, as colocated serve does, same bits) for what a
//    prefill engine cannot do: logprobs and max_tokens 0 (the logits live
//    where the prompt is computed), an answer already begun (resumed from
//    another server, or preempted here); and for every prompt while no
//    prefill engine link is up (local_prefill; then HealthNote says so).
//  - Poll: committed handoffs resume their sequence; a handoff that failed for
//    its link's or its peer's sake is placed again (another engine preferred)
//    up to max_placements; any other failure fails the request.
//  - OnEnd: a handoff still open is aborted; the handoff metrics.
//  - Healthy: at least one prefill engine link is up, or local_prefill.
//
// Its per-request state (the open handoff, its placements, its timings) is a
// map inside the role; the engine's Sequence knows nothing of handoffs.
// Loop thread only, except Validate and Healthy.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "decode/prefill_links.h"
#include "model/model.h"
#include "runtime/engine_options.h"
#include "runtime/engine_role.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
}  // namespace prometheus

namespace tandem::decode {

// The decode role's options (serve --prefill ...).
struct DecodeOptions {
  std::string prefill_addresses;  // "host:port", comma-separated
  bool discovered = false;        // the prefill engines come from discovery (SetPrefillAddresses)
  // What the prefill engines hold, from their KV events (by address); none:
  // a prompt goes where this server sent its prefix before.
  const CachedPrefixes* cached = nullptr;
  transfer::VerifyMode verify = transfer::VerifyMode::kAll;
  transfer::TransportKind transport = transfer::TransportKind::kAuto;
  // The links' transport; empty: one of `transport`'s kind (tests: a loopback one).
  std::function<StatusOr<std::unique_ptr<transfer::Transport>>()> make_transport;
  std::chrono::milliseconds peer_timeout{5000};       // a prefill engine silent this long is declared dead
  std::chrono::milliseconds handoff_timeout{60000};   // destination sent -> Commit, before the handoff is aborted
  std::chrono::milliseconds page_wait{30'000};        // queued for pages to begin a handoff (Bootstrapping)
  // A prompt whose handoff fails for its link's or its peer's sake is placed
  // again (new reservation, new attempt id) up to this many times in all.
  int32_t max_placements = 3;
  // No prefill engine link up: compute prompts here (true), or refuse them
  // (503) until one is back.
  bool local_prefill = true;
  transfer::ClusterKey cluster_key;                   // --cluster-key-file
  // Link to prefill engines of other numerics (--allow-mixed-numerics, a
  // rolling upgrade): the engine then reports a mixed numerics identity.
  bool allow_mixed_numerics = false;
};

class DecodeRole : public EngineRole {
 public:
  // Starts connecting to the prefill engines, for an engine of `model` built
  // with `engine` (pass the role to Engine::Create).
  static StatusOr<std::unique_ptr<DecodeRole>> Connect(const Model& model, const EngineOptions& engine,
                                                       const DecodeOptions& options);
  // The links' options Connect uses (addresses, layout and weights
  // identities, timings), for tests and fuzzers that change some (a loopback
  // transport, a fake clock) and pass them to Start.
  static StatusOr<PrefillLinksOptions> LinksOptions(const Model& model, const EngineOptions& engine,
                                                    const DecodeOptions& options);
  // The links' Bootstrapping deadline is options.page_wait; their Env is
  // the role's too (the page wait).
  static StatusOr<std::unique_ptr<DecodeRole>> Start(const DecodeOptions& options, PrefillLinksOptions links);
  ~DecodeRole() override;

  uint8_t* PoolMemory() override { return links_->PoolMemory(); }
  void Attach(RoleHost& host) override;
  StatusOr<Admission> Admit(Sequence& seq) override;
  void Poll() override;
  void OnEnd(const Sequence& seq, FinishReason reason, const Status& error) override;
  bool Healthy() const override;
  std::string HealthNote() const override;  // any thread: the links as of the last Poll
  bool AdmitsMixedNumerics() const override { return options_.allow_mixed_numerics; }
  // Discovery's view of the prefill engines (any thread): PrefillLinks::SetAddresses.
  void SetPrefillAddresses(std::vector<std::string> addresses) { links_->SetAddresses(std::move(addresses)); }
  uint64_t instance_id() const { return links_->instance_id(); }

 private:
  // One request's handoff state.
  struct Handoff {
    uint64_t id = 0;         // the open attempt, 0: none
    int32_t placements = 0;  // attempts begun
    uint64_t replaces = 0;   // a failed attempt (another prefill engine is preferred), 0: none
    std::chrono::steady_clock::time_point page_wait_since{}, sent, committed;
    double seconds = 0;      // waiting for its handoffs, in all
    // Where its time went (tandem_request_phase_seconds_total): before its
    // first destination, and the committed attempt's parts as the prefill
    // engine measured them; failed attempts' waits apart.
    double page_wait_s = 0, queue_s = 0, compute_s = 0, transfer_s = 0, commit_s = 0, failed_s = 0;
  };
  struct Metrics;
  DecodeRole(DecodeOptions options, std::unique_ptr<PrefillLinks> links, const Env* env);
  void ExportCounters();

  const DecodeOptions options_;
  std::unique_ptr<PrefillLinks> links_;
  const Env* const env_;
  RoleHost* host_ = nullptr;
  std::unique_ptr<Metrics> metrics_;
  std::map<const Sequence*, Handoff> handoffs_;   // requests admitted at least once, until they end
  std::map<uint64_t, Sequence*> open_;            // open attempt -> its sequence
  uint64_t next_handoff_ = 1;
  PrefillLinks::Counters seen_;                   // counters already exported
  double handoff_seconds_total_ = 0, request_seconds_total_ = 0;
  // links_->healthy() as of the last Poll, for other threads (Healthy, HealthNote).
  std::atomic<bool> links_up_{false};
};

}  // namespace tandem::decode
