// `tandem serve --disagg`: prefill engines, decode servers and a router on
// this host, as child processes of this binary, started in order and stopped
// together; a child that exits by itself is restarted (on its port). With
// --debug-fault-control (tests and soaks only) the launcher also takes
// requests to kill, restart, drain, stop and continue any of them
// (POST /debug/<prefill|decode|router>/<i>), so a load generator can inject
// those faults on a schedule.
#pragma once

#include <string>
#include <vector>

#include "transfer/transport_kind.h"

namespace tandem::node {

struct DisaggLaunch {
  std::string host = "127.0.0.1";
  int port = 8080;                          // the router's, public (0: any free)
  // Where the prefill engines and decode servers listen (--children-host):
  // loopback, so that only the router is reachable from other hosts.
  std::string children_host = "127.0.0.1";
  std::vector<std::string> model_args;      // -m, -t, --isa ...
  std::vector<std::string> attention_args;  // --attention, --topk, --index-k-dtype (both engines)
  std::vector<std::string> decode_args;     // engine options for the decode server
  std::vector<std::string> prefill_args;    // --chunk-size, --debug-unsafe-early-commit ...
  // Engine i's own arguments after prefill_args (its L3 folder and share);
  // none when shorter than prefill_engines.
  std::vector<std::vector<std::string>> prefill_engine_args;
  std::vector<std::vector<std::string>> decode_server_args;  // decode server i's own (its L3 folder and share)
  std::vector<std::string> router_args;     // --log-level
  // --transport (the prefill engines' addresses say tcp:// or ucx://)
  transfer::TransportKind transport = transfer::TransportKind::kAuto;
  int prefill_engines = 1;                  // each decode server balances them (--prefill a,b,...)
  int decode_servers = 1;                   // the router balances them (--decode a,b,...)
  bool fault_control = false;               // --debug-fault-control
  std::string cluster_key_file;             // the engines' shared secret; empty: a fresh random one
  int restart_budget = 5;                   // restarts of one child within a minute (node/supervisor.h)
};

// Prefill engine i's name: its log prefix, and its L3 folder's under --disk-cache-dir.
std::string PrefillEngineName(int i);

// Runs until SIGTERM/SIGINT, restarting children that exit by themselves
// (node/supervisor.h); returns 0, or 1 when a child's restart budget is spent.
int RunDisagg(const DisaggLaunch& launch);

}  // namespace tandem::node
