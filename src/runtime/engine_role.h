// A role: what an engine does besides computing its requests' prompts and
// tokens itself. The engine is one loop (runtime/engine.h: take new requests,
// drop ended ones, poll the role, admit, schedule, run, draw, retire); a role
// plugs into its seams, below, and keeps its own per-request state, metrics
// and links. Colocated serving is the empty role: this class as it is, every
// seam doing what a colocated engine does.
//
// The roles there are:
//  - prefill (prefill/prefill_engine.h): each request is a decode engine's
//    handoff; every finished layer of a step is written to its destination
//    (WatchesLayers, BeforeForward, OnLayer), and the request ends when its
//    prompt is done, with its first token (TakeToken), its pages read to the
//    end before they are released (BeforeRelease, OnEnd).
//  - decode (decode/decode_role.h): a request's prompt is computed by a
//    prefill engine and its cache lands in this engine's own pool
//    (PoolMemory, Admit -> kHeld, Poll -> RoleHost::Resume), on links whose
//    health is the engine's (Healthy).
//
// A new role implements the seams it needs and is passed to Engine::Create.
// Every method is called from the engine's loop thread (Healthy too: the
// engine publishes it), except Validate (any thread).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/cache_spec.h"
#include "model/forward.h"
#include "runtime/request.h"
#include "runtime/sequence.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace tandem {

class PagePool;
class PrefixIndex;
class TieredCache;

// What the engine lends its role (loop thread only).
class RoleHost {
 public:
  virtual PagePool& pool() = 0;
  virtual PrefixIndex* index() = 0;   // null without the prefix cache
  virtual TieredCache* tiers() = 0;   // null without tiers
  virtual const CacheSpec& cache_spec() const = 0;
  virtual prometheus::Registry& metrics_registry() = 0;  // the engine's /metrics
  // A sequence the role held (Admit said kHeld): its pages now hold its
  // whole prompt (the sequence owns one reference each), `first_token` was
  // sampled where the prompt was computed, and `cached_tokens` of the prompt
  // were found in this engine's own prefix cache. It runs on from here.
  virtual void Resume(Sequence& seq, std::vector<int32_t> pages, int32_t first_token, int64_t cached_tokens) = 0;
  // Held sequences to place again: back to the head of the waiting queue, in
  // the order they were admitted.
  virtual void Requeue(std::span<Sequence* const> seqs) = 0;
  // Ends a sequence with an error (OnEnd follows).
  virtual void Fail(Sequence& seq, Status error) = 0;

 protected:
  ~RoleHost() = default;
};

class EngineRole {
 public:
  enum class Admission {
    kLocal,  // compute its prompt here, as a colocated engine does
    kHeld,   // the role brings its prompt's cache; the sequence waits until Resume
    kWait,   // not yet (no pages to receive it): stop admitting until the next step
  };

  virtual ~EngineRole() = default;

  // Before the page pool exists: the memory it must live in (registered for
  // a transport, say), or null for memory of its own.
  virtual uint8_t* PoolMemory() { return nullptr; }
  // Once, after the pool, prefix index and tiers exist and before the loop
  // starts. May wait (bounded) for what the role needs to serve.
  virtual void Attach(RoleHost& host) { (void)host; }

  // Any thread: a request this role cannot serve (the caller's error).
  virtual Status Validate(const RequestSpec& spec) const {
    (void)spec;
    return Status::Ok();
  }
  // A waiting sequence's turn to be admitted. An error ends the request.
  virtual StatusOr<Admission> Admit(Sequence& seq) {
    (void)seq;
    return Admission::kLocal;
  }
  // Whatever arrived for the role since the last turn of the loop (it calls
  // back through RoleHost).
  virtual void Poll() {}

  // The layer seam: when WatchesLayers(), BeforeForward is told each step's
  // members and their chunks, then OnLayer after every registered buffer of
  // each layer is written for all of them, then AfterForward.
  virtual bool WatchesLayers() const { return false; }
  virtual void BeforeForward(std::span<Sequence* const> members, std::span<const SequenceChunk> batch) {
    (void)members;
    (void)batch;
  }
  virtual void OnLayer(int layer) { (void)layer; }
  virtual void AfterForward() {}

  // A sequence's prompt is computed and its full pages may go to the prefix
  // index right away (so its other choices share them); false: only when it
  // ends.
  virtual bool SharesPromptEarly() const { return true; }
  // A token was drawn for `seq` at position seq.tokens.size(). A value: the
  // role took it and the request ends with that reason; none: it is the
  // request's next token, streamed as usual.
  virtual std::optional<FinishReason> TakeToken(Sequence& seq, int32_t token) {
    (void)seq;
    (void)token;
    return std::nullopt;
  }
  // Before any of the sequence's pages are released (it ends, or it is
  // preempted and will be recomputed): whatever reads them must be done.
  virtual void BeforeRelease(const Sequence& seq) { (void)seq; }
  // The sequence ended (its pages released): finished with `reason`, or
  // failed with `error` (then reason is kError).
  virtual void OnEnd(const Sequence& seq, FinishReason reason, const Status& error) {
    (void)seq;
    (void)reason;
    (void)error;
  }

  // Whether the role can serve: the engine's health, which it publishes for
  // other threads after each Poll and step.
  virtual bool Healthy() const { return true; }
  // Any thread: why the role serves in a degraded way (say, prompts
  // computed here for want of a peer), "" when it does not.
  virtual std::string HealthNote() const { return {}; }
  // Whether the role takes computed rows from peers of other numerics (a
  // decode server with --allow-mixed-numerics): the engine's numerics
  // identity then says "mixed" (model/numerics.h).
  virtual bool AdmitsMixedNumerics() const { return false; }
};

}  // namespace tandem
