#include "bin/engine_flags.h"

#include "bin/shared_flags.h"

namespace tandem::cli {

void EngineFlags::AddTo(CLI::App* cmd, EngineOptions* e) {
  AddContextTokens(cmd, &e->context_tokens);
  cmd->add_option("--cache-tokens", e->cache_tokens, "Page pool size in tokens")
      ->check(CLI::Range(int64_t(64), int64_t(1) << 30));
  AddMaxRunning(cmd, &e->max_running);
  AddChunkSize(cmd, &e->chunk_size);
  AddMaxBatchTokens(cmd, &e->max_batch_tokens);
  cmd->add_option("--prefill-order", prefill_order,
                  "Which prompts' chunks a step serves first: arrival (default: bounds the tail, the last prompt of "
                  "a burst waits for the burst, not for later short appends) or shortest (the oldest, then shortest "
                  "remaining: a lower median time to first token, a longer tail)");
  cmd->add_option_function<int64_t>(
         "--step-time-ms", [e](int64_t ms) { e->step_time = std::chrono::milliseconds(ms); },
         "Beside decoding sequences, prompt chunks are sized from measured throughput so a step takes about this "
         "long: what a burst of prompts may add to inter-token latency (default 200; 0: only --max-batch-tokens)")
      ->check(CLI::Range(int64_t(0), int64_t(600000)));
  cmd->add_option_function<int64_t>(
         "--loop-watchdog-ms", [e](int64_t ms) { e->loop_watchdog = std::chrono::milliseconds(ms); },
         "While one step of the engine loop runs longer than this, /health answers 503 'stalled' with the reason "
         "(a router stops placing requests here) (default 15000; 0: off)")
      ->check(CLI::Range(int64_t(0), int64_t(3'600'000)));
  AddGrammarBudget(cmd, &e->grammar_work_per_step, &e->grammar_time_share);
  cmd->add_option("--speculate", e->speculate_tokens,
                  "Speculative decoding: each decoding sequence drafts up to this many tokens from its own context "
                  "(an earlier occurrence of its newest tokens) and verifies them in one pass; a draft is kept only "
                  "where it equals the token drawn at its position, so answers are the same bits as without (0: off)")
      ->check(CLI::Range(0, 16));
  cmd->add_option("--speculate-max-batch", e->speculate_max_batch,
                  "Speculate only while at most this many sequences decode in a step (a larger batch is "
                  "compute-bound)")
      ->check(CLI::Range(1, 4096));
  cmd->add_flag("--no-prefix-cache", no_prefix_cache, "Compute every prompt from its first token (no prefix reuse)");
}

Status EngineFlags::Apply(EngineOptions* e) const {
  TANDEM_ASSIGN_OR_RETURN(e->prefill_order, ParsePrefillOrder(prefill_order));
  e->prefix_cache = !no_prefix_cache;
  return Status::Ok();
}

std::vector<std::string> EngineFlags::ToArgs(const EngineOptions& e) const {
  std::vector<std::string> args = {
      "--ctx-size", std::to_string(e.context_tokens),
      "--cache-tokens", std::to_string(e.cache_tokens),
      "--max-running", std::to_string(e.max_running),
      "--chunk-size", std::to_string(e.chunk_size),
      "--max-batch-tokens", std::to_string(e.max_batch_tokens),
      "--prefill-order", prefill_order,
      "--step-time-ms", std::to_string(e.step_time.count()),
      "--loop-watchdog-ms", std::to_string(e.loop_watchdog.count()),
      "--grammar-work-per-step", std::to_string(e.grammar_work_per_step),
      "--grammar-time-share", std::to_string(e.grammar_time_share),
      "--speculate", std::to_string(e.speculate_tokens),
      "--speculate-max-batch", std::to_string(e.speculate_max_batch),
  };
  if (no_prefix_cache) args.push_back("--no-prefix-cache");
  return args;
}

}  // namespace tandem::cli
