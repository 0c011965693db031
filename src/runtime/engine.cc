#include "runtime/engine.h"
#include "common/log.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>

#include "model/tokenizer.h"
#include "runtime/stop_strings.h"

namespace tandem {

using Clock = std::chrono::steady_clock;

StatusOr<PrefillOrder> ParsePrefillOrder(const std::string& name) {
  if (name == "arrival") return PrefillOrder::kArrival;
  if (name == "shortest") return PrefillOrder::kShortestFirst;
  return InvalidArgument("--prefill-order must be arrival or shortest, not '" + name + "'");
}

StatusOr<std::unique_ptr<Engine>> Engine::Create(const Model& model, const EngineOptions& options, Role role) {
  if (options.max_running < 1 || options.max_waiting < 0 || options.chunk_size < 1 ||
      options.max_batch_tokens < 1 || options.cache_tokens < kPageTokens || options.grammar_work_per_step < 1 ||
      !(options.grammar_time_share > 0 && options.grammar_time_share <= 100)) {
    return InvalidArgument("engine options out of range (max-running, chunk-size, max-batch-tokens, "
                           "grammar-work-per-step >= 1; grammar-time-share in (0, 100]; cache >= one page)");
  }
  TANDEM_ASSIGN_OR_RETURN(CacheSpec spec, MakeCacheSpec(model.config(), options.attention));
  if (const ModelConfig& c = model.config();
      c.is_dsa() && (spec.attention.kind != AttentionKind::kSparse || spec.attention.top_k != c.dsa.index_top_k)) {
    TLOG_WARN("%s is a deepseek32 model trained with sparse attention over its indexer's top %lld positions; this "
              "engine runs %s (pass --attention sparse --topk %lld for the model's own computation)\n",
              c.name.c_str(), (long long)c.dsa.index_top_k, AttentionFingerprint(spec.attention).c_str(),
              (long long)c.dsa.index_top_k);
  }
  if (role.prefill && role.decode) return InvalidArgument("an engine cannot be both prefill and decode role");
  const bool tiers = options.tiers.host_pages > 0 || options.tiers.host_bytes > 0;
  // The tiers keep rows across restarts: only for the same weights and the same attention.
  // Both are keyed fingerprints (common/keyed_fingerprint.h); AttentionFingerprint is one
  // "attention=..." part.
  const std::string weights =
      tiers ? WeightsIdentity(model) + ";" + AttentionFingerprint(spec.attention) : "";
  auto engine = std::unique_ptr<Engine>(new Engine(model, options, std::move(spec), std::move(role)));
  if (tiers) {
    if (!engine->index_) return InvalidArgument("cache tiers need the prefix cache (drop --no-prefix-cache)");
    TANDEM_ASSIGN_OR_RETURN(engine->tiers_, TieredCache::Create(*engine->pool_, engine->spec_.registry, options.tiers,
                                                                weights));
    engine->index_->SetEvictHook([t = engine->tiers_.get()](uint64_t key, uint64_t parent,
                                                             std::span<const int32_t> tokens, int32_t page) {
      t->OnL1Evict(key, parent, tokens, page);
    });
    engine->scheduler_.SetTiers(engine->tiers_.get());
    if (engine->remote_) engine->remote_->SetTiers(engine->tiers_.get());
  }
  engine->loop_ = std::thread([e = engine.get()] { e->Loop(); });
  return engine;
}

Engine::Engine(const Model& model, const EngineOptions& options, CacheSpec spec, Role role)
    : model_(model),
      options_(options),
      spec_(std::move(spec)),
      context_tokens_(options.context_tokens > 0 ? options.context_tokens : model.config().context_length),
      threads_(options.threads),
      remote_(std::move(role.decode)),
      sink_(role.prefill),
      pool_(remote_ ? std::make_unique<PagePool>(spec_.registry, int(model.config().n_layers),
                                                 (options.cache_tokens + kPageTokens - 1) / kPageTokens,
                                                 remote_->PoolMemory())
                    : std::make_unique<PagePool>(spec_.registry, int(model.config().n_layers),
                                                 (options.cache_tokens + kPageTokens - 1) / kPageTokens)),
      index_(options.prefix_cache ? std::make_unique<PrefixIndex>(*pool_) : nullptr),
      forward_(model, spec_, threads_),
      constraints_(model.tokenizer()),
      grammar_budget_(options.grammar_work_per_step),
      scheduler_(options_, *pool_, index_.get(), metrics_, counters_,
                 Scheduler::Hooks{[this](Sequence& s, Status st) { Fail(s, std::move(st)); },
                                  [this](Sequence& s, const std::string& why) { Finish(s, why); },
                                  [this](Sequence& s) { Retire(s); },
                                  remote_ ? std::function<Status(Sequence&)>([this](Sequence& s) {
                                    return remote_->Start(s.handoff, s.tokens, s.spec.sampling, s.replaces);
                                  })
                                          : nullptr}) {
  pool_->set_debug_poison(options.debug_poison_pages);
  if (remote_) {
    remote_->Attach(*pool_, index_.get());
    link_healthy_ = remote_->healthy();  // not "healthy" until a link is up (the loop keeps it current)
  }
  loop_alive_ = true;
}

Engine::~Engine() {
  Shutdown(std::chrono::milliseconds(0));
  if (tiers_) {
    tiers_->Drain();  // every copy that holds an L1 reference is done
    tiers_->Poll();   // and drops it
  }
  if (index_) index_->SetEvictHook(nullptr);
  tiers_.reset();
  index_.reset();   // releases cached pages while the pool lives
  remote_.reset();  // the receiver's pages, then the connection; the pool's memory goes last
}

std::vector<std::pair<const uint8_t*, size_t>> Engine::BufferMemory(CacheBufferId b) const {
  std::vector<std::pair<const uint8_t*, size_t>> ranges;
  const CacheLayout& layout = pool_->layout();
  for (int l = 0; l < layout.n_layers(); ++l) {
    ranges.push_back({pool_->Segment(b, l, 0), size_t(layout.page_stride(b) * pool_->total_pages())});
  }
  return ranges;
}

void Engine::Shutdown(std::chrono::milliseconds drain) {
  {
    MutexLock lock(mu_);
    if (!stopping_.exchange(true)) drain_deadline_ = Clock::now() + drain;
  }
  wake_.notify_all();
  if (loop_.joinable()) loop_.join();
}

StatusOr<std::shared_ptr<RequestHandle>> Engine::Submit(RequestSpec spec) {
  if (spec.prompt.empty()) return InvalidArgument("the prompt has no tokens");
  if (int64_t(spec.prompt.size()) >= context_tokens_) {
    return InvalidArgument("the prompt has " + std::to_string(spec.prompt.size()) +
                           " tokens but the context holds " + std::to_string(context_tokens_));
  }
  const int64_t pages_needed = (int64_t(spec.prompt.size()) + kPageTokens) / kPageTokens;
  if (pages_needed > pool_->total_pages()) {
    return InvalidArgument("the prompt needs " + std::to_string(pages_needed) +
                           " cache pages; the cache has " + std::to_string(pool_->total_pages()));
  }
  for (int32_t t : spec.prompt) {
    if (t < 0 || t >= model_.config().vocab_size) return InvalidArgument("token id out of range");
  }
  TANDEM_RETURN_IF_ERROR(spec.sampling.Validate());
  if (!spec.sampling.constraint.empty() && spec.sampling.answer_budget == 0) {
    spec.sampling.answer_budget = spec.max_tokens;  // travels to a prefill engine, which samples with max_tokens 1
  }
  if (spec.max_tokens < 0) return InvalidArgument("max_tokens must not be negative");
  if (spec.max_tokens == 0 && remote_) {
    return InvalidArgument("max_tokens 0 is not supported by a disaggregated decode server (its prefill engine samples a first token)");
  }
  if (spec.prompt_logprobs && spec.logprobs < 0) return InvalidArgument("prompt logprobs need logprobs >= 0");
  if (spec.logprobs > kMaxTopLogprobs) {
    return InvalidArgument("at most " + std::to_string(kMaxTopLogprobs) + " top logprobs per token");
  }
  if (spec.logprobs >= 0 && remote_) {
    return InvalidArgument(
        "logprobs are not supported by a disaggregated decode server yet: its first token is sampled at the prefill "
        "engine, where that position's logits are");
  }
  auto seq = std::make_unique<Sequence>();
  seq->arrival = Clock::now();
  seq->deadline = seq->arrival + options_.request_timeout;
  if (spec.deadline != Clock::time_point{}) seq->deadline = std::min(seq->deadline, spec.deadline);
  seq->prompt_len = int64_t(spec.prompt.size());
  seq->tokens = spec.prompt;
  seq->decoder = std::make_unique<StreamDecoder>(model_.tokenizer());
  seq->stops = std::make_unique<StopStringMatcher>(spec.stop);
  seq->spec = std::move(spec);
  std::shared_ptr<RequestHandle> handle;
  {
    MutexLock lock(mu_);
    if (stopping_) return Unavailable("the server is shutting down");
    if (int64_t(incoming_.size()) + published_.waiting >= options_.max_waiting) {
      return ResourceExhausted("too many requests are waiting (" + std::to_string(options_.max_waiting) +
                               "); retry later");
    }
    handle = std::make_shared<RequestHandle>(next_id_++);
    seq->handle = handle;
    incoming_.push_back(std::move(seq));
  }
  wake_.notify_all();
  return handle;
}

EngineStats Engine::Stats() const {
  MutexLock lock(mu_);
  EngineStats s = published_;
  s.healthy = Healthy();
  return s;
}

void Engine::Loop() {
  for (;;) {
    TakeNewRequests();
    bool drain_over = false;
    {
      MutexLock lock(mu_);
      drain_over = stopping_ && Clock::now() >= drain_deadline_;
    }
    if (drain_over) {
      for (auto& s : scheduler_.running()) s->handle->Cancel();
      for (auto& s : scheduler_.waiting()) s->handle->Cancel();
      for (auto& s : scheduler_.prefetching()) s->handle->Cancel();
    }
    DropCancelledAndExpired();
    if (stopping_ && scheduler_.running().empty() && scheduler_.waiting().empty() && scheduler_.prefetching().empty()) {
      MutexLock lock(mu_);  // a Submit that raced Shutdown is in incoming_: it ends too
      if (incoming_.empty()) break;
      continue;
    }
    if (remote_) PollRemote();
    if (tiers_) {
      tiers_->Poll();
      // Prefetched (or out of time): back to the head of the queue.
      for (auto it = scheduler_.prefetching().rbegin(); it != scheduler_.prefetching().rend(); ++it) {
        if ((*it)->prefetch->Ready()) scheduler_.waiting().push_front(std::move(*it));
      }
      std::erase_if(scheduler_.prefetching(), [](const auto& s) { return s == nullptr; });
    }
    scheduler_.Admit();
    if (scheduler_.running().empty()) {
      PublishStats();
      UniqueLock lock(mu_);
      wake_.wait_for(lock.native(), scheduler_.prefetching().empty() ? std::chrono::milliseconds(50) : std::chrono::milliseconds(1),
                     [&]() REQUIRES(mu_) { return !incoming_.empty() || stopping_; });
      continue;
    }
    Step();
    PublishStats();
    if (remote_ && std::all_of(scheduler_.running().begin(), scheduler_.running().end(), [](const auto& s) { return s->awaiting; })) {
      // Only handoffs in flight: nothing to compute until a commit arrives.
      UniqueLock lock(mu_);
      wake_.wait_for(lock.native(), std::chrono::microseconds(200));
    }
  }
  PublishStats();
  loop_alive_ = false;
}

void Engine::TakeNewRequests() {
  MutexLock lock(mu_);
  while (!incoming_.empty()) {
    scheduler_.waiting().push_back(std::move(incoming_.front()));
    incoming_.pop_front();
  }
}

void Engine::DropCancelledAndExpired() {
  const auto now = Clock::now();
  auto check = [&](Sequence& s) {
    if (s.handle->cancelled()) {
      Finish(s, "cancelled");
    } else if (now > s.deadline) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(s.deadline - s.arrival).count();
      Fail(s, Status(StatusCode::kDeadlineExceeded,
                     "the request exceeded its deadline of " + std::to_string(ms) + " ms"));
    }
  };
  for (auto& s : scheduler_.running()) check(*s);
  for (auto& s : scheduler_.waiting()) check(*s);
  for (auto& s : scheduler_.prefetching()) check(*s);
  std::erase_if(scheduler_.running(), [](const auto& s) { return s->done; });
  std::erase_if(scheduler_.waiting(), [](const auto& s) { return s->done; });
  std::erase_if(scheduler_.prefetching(), [](const auto& s) { return s->done; });
}

void Engine::Step() {
  std::vector<SequenceChunk> batch;
  std::vector<Sequence*> members = scheduler_.Schedule(&batch);
  std::vector<Draw> draws;
  // Sequences whose token waited for its mask: their logits were kept (a
  // preempted one computes them again, and is not here until it has).
  for (const auto& s : scheduler_.running()) {
    if (!s->done && !s->mask_row.empty() && s->computed == int64_t(s->tokens.size())) {
      draws.push_back({s.get(), s->mask_row});
    }
  }
  // Masks may add a share of the model's time to the step when any sequence
  // computed in it (runtime/grammar_budget.h); when none did (only masks are
  // waiting), only the work bound.
  auto until = std::chrono::steady_clock::time_point::max();
  if (!members.empty()) {
    const auto began = std::chrono::steady_clock::now();
    RunBatch(members, batch, &draws);
    const auto now = std::chrono::steady_clock::now();
    until = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      (now - began) * options_.grammar_time_share);
  }
  DrawTokens(draws, until);
  std::erase_if(scheduler_.running(), [](const auto& s) { return s->done; });
}

// Runs the forward pass over the batch and queues, for every member whose
// prompt is done, the draw of its next token.
void Engine::RunBatch(const std::vector<Sequence*>& members, const std::vector<SequenceChunk>& batch,
                      std::vector<Draw>* draws) {
  std::vector<PrefilledChunk> streamed;
  if (sink_) {
    for (size_t b = 0; b < members.size(); ++b) {
      streamed.push_back({members[b]->handle->id(), batch[b].start_pos,
                          batch[b].start_pos + int64_t(batch[b].tokens.size()), members[b]->pages,
                          members[b]->gates.get()});
    }
    forward_.SetLayerHook([&](int layer) { sink_->OnLayer(layer, streamed, *pool_); });
  }
  logits_.clear();
  Status st = forward_.Run(batch, *pool_, &logits_);
  if (sink_) forward_.SetLayerHook(nullptr);
  if (!st.ok()) {
    for (Sequence* s : members) Fail(*s, st);
    return;
  }
  const size_t vocab = size_t(model_.config().vocab_size);
  size_t rows = 0;  // logits rows before member b's (a chunk with all_logits has one per token)
  for (size_t b = 0; b < members.size(); ++b) {
    Sequence& s = *members[b];
    const size_t n_rows = batch[b].all_logits ? batch[b].tokens.size() : 1, first_row = rows;
    auto row_at = [&, first_row](size_t i) {
      return std::span<const float>(logits_).subspan((first_row + i) * vocab, vocab);
    };
    if (batch[b].all_logits) CollectPromptLogprobs(s, batch[b].start_pos, n_rows, row_at);
    rows += n_rows;
    s.computed += int64_t(batch[b].tokens.size());
    if (s.computed < int64_t(s.tokens.size())) continue;  // prompt not done yet
    if (s.spec.prompt_logprobs && !s.prompt_logprobs_sent) {
      StreamEvent ev;
      ev.prompt_logprobs = std::move(s.prompt_logprobs);
      s.prompt_logprobs.clear();
      s.prompt_logprobs_sent = true;
      s.handle->Push(std::move(ev));
    }
    if (s.spec.max_tokens == 0) {  // the prompt alone was asked for (echo)
      Finish(s, "length");
      continue;
    }
    if (s.generated == 0) IndexPrompt(s);
    s.mask_row.clear();  // fresh logits (this member was preempted while its mask was made)
    draws->push_back({&s, row_at(n_rows - 1)});
  }
}

// A prompt's full pages go to the prefix index as soon as they are computed
// (they are never written again), so requests sent with the same prompt
// meanwhile (the other choices of an n > 1 request) share them instead of
// computing it again. Not while a host-tier load may still be landing in
// them (Retire indexes those, after waiting).
void Engine::IndexPrompt(Sequence& s) {
  if (!index_ || s.gates || sink_) return;
  index_->Insert(std::span<const int32_t>(s.tokens).first(size_t(s.prompt_len)), s.pages);
}

void Engine::PublishStats() {
  if (remote_) link_healthy_ = remote_->healthy();  // also after Admit found a link dead
  EngineStats s = counters_;
  s.running = int64_t(scheduler_.running().size());
  s.waiting = int64_t(scheduler_.waiting().size());
  s.pages = pool_->accounting();
  s.cached_pages = index_ ? index_->cached_pages() : 0;
  metrics_.running.Set(double(s.running));
  metrics_.waiting.Set(double(s.waiting));
  metrics_.pages_free.Set(double(s.pages.free));
  metrics_.pages_used.Set(double(s.pages.used));
  metrics_.pages_reserved.Set(double(s.pages.reserved));
  metrics_.prefix_cached_pages.Set(double(s.cached_pages));
  if (tiers_) metrics_.PublishTiers(tiers_->stats());
  MutexLock lock(mu_);
  published_ = s;
}

}  // namespace tandem
