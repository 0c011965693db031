// Client-side helpers shared by the disaggregation end-to-end tests: the
// prompts and conversations they send, and the accounting they wait for.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace tandem::testing {

// A greedy /v1/completions of token ids; the text, or "HTTP <status>: <body>".
std::string Complete(int port, const std::vector<int32_t>& prompt, int max_tokens, int* status = nullptr);

// Deterministic test prompt number i (40 + 23 i tokens).
std::vector<int32_t> Prompt(int i);

// One two-turn chat: turn 2 re-sends turn 1 and its answer. The answers, or
// one "HTTP <status>: <body>" entry.
std::vector<std::string> Conversation(int port, int i);

// Polls /metrics until nothing is running, waiting, reserved, quarantined or
// in a handoff, and every used page belongs to the prefix cache (bounded by
// `timeout`). Returns the last metrics read; `ok` says whether that state came.
std::map<std::string, double> WaitForBaseline(int port, std::chrono::milliseconds timeout, bool* ok);

// How many times a decode server's log says a prefill engine link came up.
// Tests that kill an engine use it: with tests running in parallel, another
// test's compatible engine may take the freed port, and the decode server
// rightly connects to it (its address is all it knows).
int LinksUp(const std::string& decode_log);

// The number after `key` in the last line of `log` that contains it (the
// prefill engine's "stopping (...)" line, say); -1 when absent.
long long NumberAfter(const std::string& log, const std::string& key);

}  // namespace tandem::testing

#include <memory>

#include "support/server_process.h"

namespace tandem::testing {

// Sparse attention (top-k 32) with an index-K of `dtype` ("fp8" | "bf16").
std::vector<std::string> SparseArgs(const std::string& dtype);

// `tandem prefill` on `model` (chunk size 100) plus `extra`; fixed_port > 0
// listens there (to restart an engine where decode servers look for it).
std::unique_ptr<ServerProcess> StartPrefill(const std::string& model, const std::string& dtype,
                                            std::vector<std::string> extra = {}, int fixed_port = 0);
// `tandem serve` (model id "tiny", 60 s request timeout); `prefill` = the
// value of --prefill ("host:port[,host:port]"), empty for a colocated server.
// A decode server gets --no-local-prefill unless `extra` holds
// "--local-prefill" (a marker of these tests, taken out): it then computes
// prompts itself while no prefill engine answers.
std::unique_ptr<ServerProcess> StartServe(const std::string& model, const std::string& dtype,
                                          const std::string& prefill = "", std::vector<std::string> extra = {},
                                          int fixed_port = 0);
std::string Loopback(int port);  // "127.0.0.1:<port>"

}  // namespace tandem::testing
