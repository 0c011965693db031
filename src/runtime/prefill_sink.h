// Where a prefill engine's computed prompts go. The engine runs in the prefill
// role when it is given a sink: its scheduler batches many requests' prompt
// chunks per step like any other work, and the sink is told, layer by layer,
// which rows of which request's pages were just written; when a request's
// prompt is done it gets the first sampled token, and the request ends there
// (its pages go to the prefix cache).
//
// Every call comes from the engine's loop thread. The engine knows nothing of
// where the pages go (the prefill role in prefill/ sends them to a decode
// engine over a transport).
#pragma once

#include <cstdint>
#include <span>

#include "cache/layer_gates.h"
#include "cache/page_pool.h"
#include "common/status.h"

namespace tandem {

struct PrefilledChunk {
  uint64_t request = 0;             // RequestHandle::id()
  int64_t begin = 0, end = 0;       // tokens computed in this step: [begin, end)
  std::span<const int32_t> pages;   // the request's page table, covering [0, end)
  const LayerGates* gates = nullptr;  // a load still landing in its cached prefix, or null
};

class PrefillSink {
 public:
  virtual ~PrefillSink() = default;
  // Every registered buffer of `layer` is written for every chunk of the
  // step (and, for the chunk that began at a cached prefix, that prefix's
  // rows are in place once its gate for the layer is open).
  virtual void OnLayer(int layer, std::span<const PrefilledChunk> chunks, PagePool& pool) = 0;
  // The request's whole prompt is computed and `first_token` sampled (at
  // position prompt.size()); `pages` cover the prompt. False: the request is
  // cancelled instead (its peer asked meanwhile).
  virtual bool OnPrefilled(uint64_t request, std::span<const int32_t> prompt, std::span<const int32_t> pages,
                           int32_t first_token, PagePool& pool) = 0;
  // Before any of the request's pages are released (it ended, or it is
  // preempted and will be recomputed): whatever reads them must be done.
  virtual void BeforeRelease(uint64_t request) = 0;
  // The request ended, its pages released: OK once handed off, Aborted when
  // cancelled, or the error that ended it (DeadlineExceeded past its deadline).
  virtual void OnEnd(uint64_t request, const Status& status) = 0;
};

}  // namespace tandem
