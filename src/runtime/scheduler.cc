#include "runtime/scheduler.h"

#include "cache/page_copy.h"

#include <algorithm>

namespace tandem {

using Clock = std::chrono::steady_clock;

Scheduler::Scheduler(const EngineOptions& options, PagePool& pool, PrefixIndex* index, EngineMetrics& metrics,
                     EngineStats& counters, EngineRole& role, Hooks hooks)
    : step_budget_(std::chrono::duration_cast<std::chrono::microseconds>(options.step_time)),
      options_(options),
      pool_(pool),
      index_(index),
      metrics_(metrics),
      counters_(counters),
      role_(role),
      hooks_(std::move(hooks)) {}

void Scheduler::ForEach(const std::function<void(Sequence&)>& fn) {
  for (auto& s : running_) fn(*s);
  for (auto& s : held_) fn(*s);
  for (auto& s : waiting_) fn(*s);
  for (auto& s : prefetching_) fn(*s);
}

void Scheduler::ForEachRunning(const std::function<void(Sequence&)>& fn) {
  for (auto& s : running_) fn(*s);
}

void Scheduler::EraseEnded() {
  auto ended = [](const auto& s) { return s == nullptr || s->done; };
  std::erase_if(running_, ended);
  std::erase_if(held_, ended);
  std::erase_if(waiting_, ended);
  std::erase_if(prefetching_, ended);
}

void Scheduler::TakePrefetched() {
  for (auto it = prefetching_.rbegin(); it != prefetching_.rend(); ++it) {
    if ((*it)->prefetch->Ready()) waiting_.push_front(std::move(*it));
  }
  std::erase_if(prefetching_, [](const auto& s) { return s == nullptr; });
}

void Scheduler::Resume(Sequence& seq) {
  auto it = std::find_if(held_.begin(), held_.end(), [&](const auto& s) { return s.get() == &seq; });
  if (it == held_.end()) return;
  // In admission order, as if it had run since it was admitted (the most
  // recently admitted is preempted first).
  auto at = std::upper_bound(running_.begin(), running_.end(), seq.admission_order,
                             [](uint64_t order, const auto& s) { return order < s->admission_order; });
  running_.insert(at, std::move(*it));
  held_.erase(it);
}

void Scheduler::Requeue(std::span<Sequence* const> seqs) {
  for (auto it = held_.rbegin(); it != held_.rend(); ++it) {
    if (std::find(seqs.begin(), seqs.end(), it->get()) != seqs.end()) waiting_.push_front(std::move(*it));
  }
  std::erase_if(held_, [](const auto& s) { return s == nullptr; });
}

void Scheduler::CountPrompt(const Sequence& seq) {
  metrics_.prompt_tokens.Increment(double(seq.prompt_len));
  counters_.prompt_tokens += seq.prompt_len;
}

// Pages for tokens [0, tokens) of seq; evicts cached prefixes first, then
// preempts other sequences. False when even that cannot make room.
// A drafted sequence's drafts, in the pages it holds and free ones: a draft
// never evicts a cached page nor preempts a sequence. Drafts past them are
// taken back.
void Scheduler::FitDrafts(Sequence& seq) {
  int64_t held = int64_t(seq.pages.size()) * kPageTokens;
  const int64_t want = seq.computed + 1 + seq.drafted;
  if (want > held) {
    const int64_t more = std::min<int64_t>((want - held + kPageTokens - 1) / kPageTokens, pool_.free_pages());
    if (more > 0) {
      if (auto pages = pool_.Allocate(more); pages.ok()) {
        seq.pages.insert(seq.pages.end(), pages->begin(), pages->end());
        held += more * kPageTokens;
      }
    }
  }
  const int64_t fit = std::max<int64_t>(0, held - seq.computed - 1);
  if (fit < seq.drafted) {
    seq.tokens.resize(seq.tokens.size() - size_t(seq.drafted - fit));
    seq.drafted = int32_t(fit);
  }
}

bool Scheduler::EnsurePages(Sequence& seq, int64_t tokens) {
  const int64_t need = (tokens + kPageTokens - 1) / kPageTokens - int64_t(seq.pages.size());
  if (need <= 0) return true;
  while (pool_.free_pages() < need) {
    if (index_ && index_->Evict(need - pool_.free_pages()) > 0) continue;
    if (ReclaimTierCopies()) continue;
    if (ReleaseWaitingPages(nullptr)) continue;
    if (!Preempt(&seq)) return false;
  }
  auto pages = pool_.Allocate(need);
  if (!pages.ok()) return false;
  seq.pages.insert(seq.pages.end(), pages->begin(), pages->end());
  return true;
}

// Waits for the copies to lower tiers that still reference L1 pages and
// drops those references. False when there were none.
bool Scheduler::ReclaimTierCopies() {
  if (!tiers_ || tiers_->l1_pages_held() == 0) return false;
  tiers_->Drain();
  tiers_->Poll();
  return true;
}

// Gives back the pages waiting requests hold (prefix hits, loads from L2)
// except `keep`'s: full pages go to the prefix index, and those requests look
// their prefix up again when admitted. False when none held any.
bool Scheduler::ReleaseWaitingPages(const Sequence* keep) {
  bool any = false;
  for (auto& w : waiting_) {
    if (w.get() == keep || w->pages.empty()) continue;
    hooks_.retire(*w);
    w->computed = 0;
    any = true;
  }
  return any;
}

// Frees the pages of the most recently admitted running sequence other than
// `keep` and sends it back to the front of the queue, to be recomputed.
bool Scheduler::Preempt(const Sequence* keep) {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    Sequence& victim = **it;
    if (&victim == keep || victim.pages.empty()) continue;
    hooks_.retire(victim);
    victim.DropDrafts();  // drafted this step: it will compute its real tokens again
    victim.computed = 0;
    ++counters_.preemptions;
    metrics_.preemptions.Increment();
    waiting_.push_front(std::move(*it));
    running_.erase(std::next(it).base());
    return true;
  }
  return false;
}

void Scheduler::ReleasePartial(PrefixIndex::Match& hit) {
  if (hit.partial_page >= 0) pool_.Release({&hit.partial_page, 1});
  hit.partial_page = -1;
  hit.partial_tokens = 0;
}

// A partial page's shared rows, copied into a page of the sequence's own
// (the cached page is never written again, so others may share it); the
// tokens reused. None when no page is free without evicting (the rows are
// then computed).
int64_t Scheduler::CopyPartial(Sequence& seq, PrefixIndex::Match& hit) {
  const int64_t n = hit.partial_tokens;
  if (hit.partial_page < 0) return 0;
  int64_t reused = 0;
  // A full pool is the steady state of a busy server: one cached page makes
  // room (the caller's references keep this chain and the partial page).
  if (pool_.free_pages() == 0 && index_) index_->Evict(1);
  if (pool_.free_pages() > 0) {
    auto page = pool_.Allocate(1);
    if (page.ok() && CopyPageRows(pool_, hit.partial_page, (*page)[0], n).ok()) {
      seq.pages.push_back((*page)[0]);
      reused = n;
    } else if (page.ok()) {
      pool_.Release(*page);
    }
  }
  ReleasePartial(hit);
  return reused;
}

// After an L1 hit of `l1` (whose references the caller keeps): continues the
// prefix from the host tier, loading it into fresh L1 pages (seq.pages, with
// seq.gates) while the request proceeds. When L3 holds more of it, and no
// prefetch was tried yet, gives every reference back, starts an L3 -> L2
// prefetch and returns false: the caller parks the request until it is ready.
bool Scheduler::LookupTiers(Sequence& seq, PrefixIndex::Match& l1, int64_t max_tokens) {
  const int64_t from = int64_t(l1.pages.size());
  TieredCache::Match m = tiers_->Lookup(seq.tokens, from, max_tokens, seq.cache_root);
  if (m.l3_pages > 0 && !seq.prefetched) {
    tiers_->Unpin(m.l2_pages);
    pool_.Release(l1.pages);
    l1.pages.clear();
    seq.prefetched = true;
    seq.l2_pages_before_prefetch = int64_t(m.l2_pages.size());
    seq.prefetch = tiers_->PrefetchFromL3(seq.tokens, from + int64_t(m.l2_pages.size()), max_tokens, seq.cache_root);
    return false;
  }
  tiers_->OnL1Hit(seq.tokens, l1.pages, seq.cache_root);
  // Only for a request that can be admitted whole: pages taken for a load of
  // one that then waits would starve the running ones (a livelock of
  // preemption and re-admission under memory pressure).
  const int64_t whole = (int64_t(seq.tokens.size()) + kPageTokens) / kPageTokens - from;
  if (whole <= pool_.free_pages() + index_->evictable_pages() + tiers_->l1_pages_held()) {
    seq.gates = tiers_->LoadMatch(
        m, [&](int64_t n) { return index_->Evict(n) > 0 || ReclaimTierCopies(); }, &seq.pages);
  } else {
    tiers_->Unpin(m.l2_pages);
  }
  const int64_t loaded = int64_t(seq.pages.size());
  const int64_t from_l3 = seq.prefetched ? std::max<int64_t>(0, loaded - seq.l2_pages_before_prefetch) : 0;
  tiers_->RecordHits(from * kPageTokens, (loaded - from_l3) * kPageTokens, from_l3 * kPageTokens);
  return true;
}

void Scheduler::Admit() {
  while (!waiting_.empty() && int32_t(running_.size() + held_.size()) < options_.max_running) {
    Sequence& seq = *waiting_.front();
    StatusOr<EngineRole::Admission> admission = role_.Admit(seq);
    if (!admission.ok()) {
      hooks_.fail(seq, admission.status());
      waiting_.pop_front();
      continue;
    }
    if (*admission == EngineRole::Admission::kWait) break;  // retry when pages free up
    if (*admission == EngineRole::Admission::kHeld) {
      // The role brings the prompt's cache; its tokens count once, however
      // often it is placed.
      if (!seq.started && seq.admissions == 0) CountPrompt(seq);
      ++seq.admissions;
      seq.admission_order = next_admission_++;
      held_.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
      continue;
    }
    if (index_ && seq.computed == 0 && seq.pages.empty() && !seq.spec.prompt_logprobs) {
      const int64_t max_tokens = int64_t(seq.tokens.size()) - 1;
      PrefixIndex::Match hit = index_->Lookup(seq.tokens, max_tokens, /*partial=*/true, seq.cache_root);
      if (tiers_ && !LookupTiers(seq, hit, max_tokens)) {
        ReleasePartial(hit);
        prefetching_.push_back(std::move(waiting_.front()));  // reading L3 into L2 first
        waiting_.pop_front();
        continue;
      }
      const bool from_tiers = !seq.pages.empty();
      if (from_tiers) hit.pages.insert(hit.pages.end(), seq.pages.begin(), seq.pages.end());
      seq.pages = std::move(hit.pages);
      seq.computed = int64_t(seq.pages.size()) * kPageTokens;
      // The tiers went past the partial page's place: it does not continue them.
      if (from_tiers) ReleasePartial(hit);
      seq.computed += CopyPartial(seq, hit);
      if (!seq.started) {
        seq.cached_prompt_tokens = std::min(seq.computed, seq.prompt_len);
        metrics_.prefix_hit_tokens.Increment(double(seq.cached_prompt_tokens));
        counters_.prefix_hit_tokens += seq.cached_prompt_tokens;
      }
    }
    // Admission needs the whole remaining prompt plus the first decode token.
    const int64_t need = (int64_t(seq.tokens.size()) + kPageTokens) / kPageTokens - int64_t(seq.pages.size());
    const int64_t evictable = (index_ ? index_->evictable_pages() : 0) + (tiers_ ? tiers_->l1_pages_held() : 0);
    if (need > pool_.free_pages() + evictable) {
      if (running_.empty() && held_.empty() && need > pool_.total_pages()) {
        hooks_.fail(seq, ResourceExhausted("the request does not fit in the cache"));
        waiting_.pop_front();
        continue;
      }
      // Nothing runs, so nothing will free pages: take back what requests
      // queued behind this one hold.
      if (running_.empty() && held_.empty() && ReleaseWaitingPages(&seq)) continue;
      break;  // wait for running sequences to finish
    }
    if (!seq.started) CountPrompt(seq);
    ++seq.admissions;
    seq.admission_order = next_admission_++;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
}

// The next step: decode tokens first (one each), then prompt chunks in the
// configured order (PrefillOrder), under the token budget; pages for every
// chunk (evicting cached prefixes, then preempting). Any order gives the same
// tokens: invariant 5.
std::vector<Sequence*> Scheduler::Schedule(std::vector<SequenceChunk>* batch) {
  std::vector<Sequence*> members;
  int64_t budget = options_.max_batch_tokens;
  int64_t decode_tokens = 0;
  last_prompt_budget_ = -1;
  std::vector<Sequence*> order;
  for (int pass = 0; pass < 2; ++pass) {
    order.clear();
    if (pass == 1 && decode_tokens > 0) {  // prompts beside decoding sequences: the step-time bound
      const int64_t prompt_budget = step_budget_.PromptTokens(decode_tokens);
      if (prompt_budget < budget) budget = last_prompt_budget_ = prompt_budget;
    }
    for (auto& r : running_) {
      const int64_t pending = int64_t(r->tokens.size()) - r->computed;
      if (r->drafted > 0) continue;  // scheduled in the first pass, with its drafts
      if (pending > 0 && (pass == 0) == (pending == 1)) order.push_back(r.get());
    }
    auto remaining = [](const Sequence* x) { return int64_t(x->tokens.size()) - x->computed; };
    if (pass == 1 && order.size() > 2 && options_.prefill_order == PrefillOrder::kShortestFirst) {
      std::stable_sort(order.begin() + 1, order.end(),
                       [&](const Sequence* x, const Sequence* y) { return remaining(x) < remaining(y); });
    }
    // Speculation while few sequences decode (a large batch is compute-bound).
    const int64_t decoding_count = std::count_if(order.begin(), order.end(),
                                                 [](const Sequence* x) { return x->computed >= x->prompt_len; });
    const bool speculate = pass == 0 && options_.speculate_tokens > 0 && hooks_.draft &&
                           decoding_count <= options_.speculate_max_batch;
    for (size_t i = 0; i < order.size() && budget > 0; ++i) {
      Sequence& s = *order[i];
      const bool still_running = std::any_of(running_.begin(), running_.end(), [&](const auto& r) { return r.get() == &s; });
      if (s.done || !still_running) continue;  // preempted by an earlier one's EnsurePages
      const bool decoding = pass == 0 && s.computed >= s.prompt_len;  // not a prompt's last token
      if (speculate && decoding) {  // leaving a token of the budget to each sequence after it
        const int64_t later = int64_t(order.size() - i - 1);
        hooks_.draft(s, std::min<int64_t>(budget - later, options_.chunk_size) - 1, decoding_count);
      }
      const int64_t pending = int64_t(s.tokens.size()) - s.computed;
      int64_t n = std::min({pending, int64_t(options_.chunk_size), budget});
      bool paged;
      if (s.drafted > 0) {  // the newest token's page as without drafts; the drafts only in pages held or free
        paged = EnsurePages(s, s.computed + 1);
        if (paged) FitDrafts(s);
        n = 1 + s.drafted;
      } else {
        paged = EnsurePages(s, s.computed + n);
      }
      if (!paged) {
        s.DropDrafts();
        // Nothing left to evict or preempt: this sequence alone fills the cache.
        if (running_.size() + held_.size() == 1) hooks_.finish(s, FinishReason::kLength);
        continue;
      }
      budget -= n;
      if (decoding) ++decode_tokens;  // a decoding sequence (not a prompt's last token)
      members.push_back(&s);
    }
  }
  // Preemption inside EnsurePages may have moved sequences; rebuild from survivors.
  std::erase_if(members, [&](Sequence* m) {
    return std::none_of(running_.begin(), running_.end(), [&](const auto& r) { return r.get() == m; });
  });
  if (members.empty()) std::erase_if(running_, [](const auto& s) { return s->done; });
  last_prompt_tokens_ = last_decode_tokens_ = 0;
  for (Sequence* s : members) {
    const int64_t pending = int64_t(s->tokens.size()) - s->computed;
    // Prompt logprobs need the logits of every prompt position: a vocab-sized
    // row per token, so such a chunk is kept to kPageTokens tokens.
    const bool prompt_logprobs = s->spec.prompt_logprobs && !s->prompt_logprobs_sent && s->computed < s->prompt_len;
    const int64_t n = std::min<int64_t>({pending, prompt_logprobs ? int64_t(kPageTokens) : int64_t(options_.chunk_size),
                                         int64_t(s->pages.size()) * kPageTokens - s->computed});
    // A drafted sequence's positions are all drawn from: logits for each.
    batch->push_back({std::span<const int32_t>(s->tokens).subspan(size_t(s->computed), size_t(n)),
                     s->computed, s->pages, prompt_logprobs || s->drafted > 0, s->gates.get()});
    // A drafted sequence's positions are its decode step's (the step's cost model: runtime/step_budget.h).
    (n - s->drafted == 1 && s->computed >= s->prompt_len ? last_decode_tokens_ : last_prompt_tokens_) += n;
  }
  return members;
}

}  // namespace tandem
