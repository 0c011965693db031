// Published traces as workloads for `bench agentic --trace FILE`.
//
// Two formats other teams publish, both JSONL:
//   - Mooncake's request trace: {"timestamp": ms, "input_length": tokens,
//     "output_length": tokens, "hash_ids": [ids]}, one request per line; each
//     hash id names a block of 512 prompt tokens, so requests whose lists
//     share a prefix share that much of their prompt.
//   - multi-turn conversations (the shape AIPerf's multi_turn and
//     genai-bench take): {"session_id": str, "turns": [{"text": str,
//     "output_length"?: tokens, "delay"?: ms, "timestamp"?: ms}]}, one
//     conversation per line, each turn sent after the previous answer (and
//     its delay), the answer kept in the conversation.
//
// Mooncake's prompts are generated: each hash id's block is SyntheticText of
// its own seed, so shared ids give byte-identical shared prefixes and the
// lengths follow the trace (scaled by length_scale, for small models). Each
// request or conversation becomes one session of RoundRecords, judged by the
// oracle like the presets' (greedy, ignore_eos, token ids).
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"
#include "loadgen/agentic.h"

namespace tandem {

struct TraceTurn {
  double at_s = -1;      // arrival since the trace's start; -1: after the previous answer and delay_s
  double delay_s = 0;    // think time before this turn (conversations)
  std::string text;      // the user message
  int max_tokens = 64;   // output_length
};

struct TraceSession {
  std::string id;
  std::vector<TraceTurn> turns;
};

struct Trace {
  std::string format;  // "mooncake" | "conversations"
  std::vector<TraceSession> sessions;  // by first arrival
  int64_t requests = 0;                // turns, all sessions together
  int64_t shared_blocks = 0;           // mooncake: hash-id blocks that more than one request uses
  size_t text_bytes = 0;               // every prompt's text, together (at most 256 MiB)
};

struct TraceOptions {
  std::string format;              // "mooncake", "conversations", or "" (told by the first line)
  double tokens_per_word = 1.0;    // the server's (CalibrateTokensPerWord)
  double length_scale = 1.0;       // every length (and Mooncake's block) times this, at least 1 token
  int64_t limit = 0;               // at most this many requests (0: all)
  int max_output_tokens = 4096;    // output lengths are capped here
};

// Reads and checks a trace: every line's fields and sizes (at most 1,000,000
// lines, 16 MiB a line, 1,048,576 input tokens, 4,096 hash ids or turns),
// naming the line of the first problem.
StatusOr<Trace> LoadTrace(const std::string& path, const TraceOptions& options);

// How long the replay's waits take at `speed` (0: none): from the first
// arrival to the last, plus the longest conversation's delays.
double TraceSeconds(const Trace& trace, double speed);

// Replays the trace: each session on one of `workers` threads, starting at its
// arrival time divided by `speed` (0: as fast as the workers go), its turns in
// order. Rounds come back sorted by (session, round), point `point`.
std::vector<RoundRecord> RunTrace(const std::string& host, int port, const std::string& model, const Trace& trace,
                                  const AgenticShape& shape, int point, int workers, double speed,
                                  PointProgress* progress);

}  // namespace tandem
