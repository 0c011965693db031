// `tandem serve`: the colocated OpenAI-compatible server (prefill and decode
// in one engine). SIGTERM or SIGINT: stop admitting, let in-flight requests
// finish (up to --shutdown-timeout), exit 0.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "bin/attention_flags.h"
#include "bin/discovery_flags.h"
#include "node/stop_signals.h"
#include "bin/commands.h"
#include "bin/shared_flags.h"
#include "common/log.h"
#include "bin/fault_flags.h"
#include "bin/tier_flags.h"
#include "node/disagg_launcher.h"
#include "bin/engine_flags.h"
#include "bin/model_options.h"
#include "kernels/cpu.h"
#include "node/decode_node.h"
#include "bin/access_flags.h"
#include "bin/http_flags.h"
#include "bin/link_flags.h"

namespace tandem::cli {
namespace {

struct ServeArgs {
  ModelOptions model;
  ServerOptions server;
  AccessFlags access;
  HttpFlags http;
  EngineOptions engine;
  decode::DecodeOptions decode;  // the decode role, with --prefill
  EngineFlags engine_flags;  // the engine's sizes and scheduling (on the prefill engines too)
  std::string log_level = "info";
  AttentionFlags attention;
  double request_timeout_s = 600, shutdown_timeout_s = 30;
  std::string verify = "all";
  bool disagg = false;
  int prefill_engines = 1;     // --disagg
  int decode_servers = 1;      // --disagg
  int restart_budget = 5;      // --disagg
  std::string children_host = "127.0.0.1";  // --disagg: where the engines and decode servers listen
  bool fault_control = false;  // --disagg, --debug-fault-control
  TierFlags tiers;
  FaultFlags faults;  // the transport's: --disagg, passed to the prefill engines
  LinkFlags link;  // with --prefill or --disagg
  int64_t handoff_timeout_ms = 60000;
  int64_t silence_timeout_ms = 5000;  // --disagg: the router's
  DiscoveryFlags discovery;              // a decode server: registers, follows the prefill engines
};

std::vector<std::string> SplitCommas(const std::string& list);

// What a decode server's engine plane touches: the prefill engines it dials
// and, with discovery, the address its KV events listen on (and are
// advertised at): without a key all of them must be loopback.
std::vector<std::string> EnginePlaneAddresses(const ServeArgs& a) {
  std::vector<std::string> out = SplitCommas(a.decode.prefill_addresses);
  if (a.discovery.enabled()) {
    out.push_back(a.server.host + ":" + std::to_string(a.server.port));
    if (!a.discovery.advertise.empty()) out.push_back(a.discovery.advertise + ":" + std::to_string(a.server.port));
  }
  return out;
}

bool IsDecodeServer(const ServeArgs& a) { return !a.decode.prefill_addresses.empty() || a.discovery.enabled(); }

std::vector<std::string> SplitCommas(const std::string& list) {
  std::vector<std::string> out;
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    if (comma > at) out.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

// Re-spells this command's options for the child processes of --disagg.
node::DisaggLaunch LaunchFor(const ServeArgs& a) {
  node::DisaggLaunch l;
  l.restart_budget = a.restart_budget;
  l.host = a.server.host;
  l.children_host = a.children_host;
  l.port = a.server.port;
  if (!a.model.model_path.empty()) l.model_args = {"-m", a.model.model_path};
  l.model_args.push_back("-t");
  l.model_args.push_back(std::to_string(a.model.threads));
  if (!a.model.isa.empty()) l.model_args.insert(l.model_args.end(), {"--isa", a.model.isa});
  if (!a.model.chat_template_path.empty()) {
    l.model_args.insert(l.model_args.end(), {"--chat-template", a.model.chat_template_path});
  }
  if (!a.model.chat_date.empty()) l.model_args.insert(l.model_args.end(), {"--chat-date", a.model.chat_date});
  l.attention_args = a.attention.Args();
  // The engine's sizes and scheduling, the same on both sides (one --cache-tokens sizes both pools; a
  // prompt the decode server accepts fits the prefill engine's context too).
  l.decode_args = a.engine_flags.ToArgs(a.engine);
  l.prefill_args = a.engine_flags.ToArgs(a.engine);
  l.decode_args.insert(l.decode_args.end(), {"--max-waiting", std::to_string(a.engine.max_waiting), "--request-timeout",
                                             std::to_string(a.request_timeout_s), "--verify-handoff", a.verify});
  if (!a.server.model_id.empty()) l.decode_args.insert(l.decode_args.end(), {"--model-id", a.server.model_id});
  for (auto* side : {&l.decode_args, &l.router_args}) {
    side->insert(side->end(), {"--shutdown-timeout", std::to_string(a.shutdown_timeout_s)});
  }
  l.decode_args.insert(l.decode_args.end(), {"--handoff-timeout-ms", std::to_string(a.handoff_timeout_ms)});
  l.router_args.insert(l.router_args.end(), {"--silence-timeout-ms", std::to_string(a.silence_timeout_ms)});
  // (A bad name is the children's to refuse, with the reason.)
  if (auto kind = transfer::ParseTransportKind(a.link.transport); kind.ok()) l.transport = *kind;
  l.prefill_engines = a.prefill_engines;
  l.decode_servers = a.decode_servers;
  if (!a.decode.local_prefill) l.decode_args.push_back("--no-local-prefill");
  l.fault_control = a.fault_control;
  l.cluster_key_file = a.link.cluster_key_file;
  for (auto* side : {&l.prefill_args, &l.decode_args, &l.router_args}) side->insert(side->end(), {"--log-level", a.log_level});
  for (auto* side : {&l.decode_args, &l.router_args}) {  // the router passes the client's key on
    for (const std::string& arg : a.access.Args()) side->push_back(arg);
    for (const std::string& arg : a.http.Args()) side->push_back(arg);
  }
  for (auto* side : {&l.prefill_args, &l.decode_args}) {
    for (const std::string& arg : a.link.ToArgs()) side->push_back(arg);
  }
  for (const std::string& arg : a.faults.TransportArgs()) l.prefill_args.push_back(arg);
  for (auto* side : {&l.decode_args, &l.prefill_args}) {
    for (const std::string& arg : a.faults.CacheArgs()) side->push_back(arg);
  }
  // Tiers on both sides: the prefill engines' save computing a prompt's
  // cached prefix, the decode server's save sending it. An L3 folder is held
  // by one process (prefix/disk_folder.h), so each engine has its own, named
  // after it; the decode server's is --disk-cache-size, and the prefill
  // engines share another --disk-cache-size equally.
  // Decode server i's folder is decode, decode1, ...; they share its --disk-cache-size equally.
  for (int i = 0; i < a.decode_servers; ++i) {
    TierFlags t = a.tiers;
    if (!t.disk_cache_dir.empty()) {
      t.disk_cache_dir += i == 0 ? std::string("/decode") : "/decode" + std::to_string(i);
      if (a.decode_servers > 1) t.disk_cache_size = std::to_string(a.engine.tiers.disk_bytes / a.decode_servers);
    }
    l.decode_server_args.push_back(t.Args());
  }
  for (int i = 0; i < a.prefill_engines; ++i) {
    TierFlags t = a.tiers;
    if (!t.disk_cache_dir.empty()) {
      t.disk_cache_dir += "/" + node::PrefillEngineName(i);
      t.disk_cache_size = std::to_string(a.engine.tiers.disk_bytes / a.prefill_engines);
    }
    l.prefill_engine_args.push_back(t.Args());
  }
  return l;
}

// The tiers, and the cache's faults (tests only) through their seams.
Status ApplyTierFlags(ServeArgs& a) {
  TANDEM_ASSIGN_OR_RETURN(a.engine.tiers, a.tiers.Resolve());
  TANDEM_ASSIGN_OR_RETURN(faults::FaultOptions faults, a.faults.Resolve(a.tiers.enabled(), /*engine=*/!a.disagg));
  faults.ApplyTo(&a.engine);
  return Status::Ok();
}

int RunServe(ServeArgs& a) {
  if (!StartLog(a.disagg ? "disagg" : IsDecodeServer(a) ? "decode" : "serve", a.log_level)) return 2;
  if (a.disagg && a.discovery.enabled()) {
    TLOG_ERROR("error: --discovery is for engines started one by one (tandem prefill, serve, router); --disagg wires "
               "its own children by address\n");
    return 2;
  }
  if (a.discovery.enabled()) {
    if (auto url = discovery::ParseEtcdUrl(a.discovery.url); !url.ok()) {
      return TLOG_ERROR("error: %s\n", url.status().message().c_str()), 2;
    }
    if (auto advertised = a.discovery.Advertised(a.server.host, a.server.port); !advertised.ok()) {
      return TLOG_ERROR("error: %s\n", advertised.status().message().c_str()), 2;
    }
  }
  if (!a.disagg &&
      (a.prefill_engines != 1 || a.decode_servers != 1 || a.fault_control || a.children_host != "127.0.0.1")) {
    TLOG_ERROR("error: --prefill-engines, --decode-servers, --children-host and --debug-fault-control are options of "
               "--disagg\n");
    return 2;
  }
  if (!a.disagg && a.faults.transport_any()) {
    // Faults of the handoff: there is none without --disagg (a decode server
    // with --prefill gets them from its prefill engines' own flags).
    TLOG_ERROR("error: --debug-unsafe-early-commit, --debug-put-delay-us, --debug-bit-flip-rate and "
               "--debug-wedge-after-messages are faults of the prefill engine's transport: they need --disagg (or "
               "pass them to `tandem prefill`)\n");
    return 2;
  }
  if (!a.link.cluster_key_file.empty() && !a.disagg && !IsDecodeServer(a)) {
    TLOG_ERROR("error: --cluster-key-file is the engines' shared secret: it needs --prefill, --discovery or --disagg\n");
    return 2;
  }
  auto access = a.access.Load();
  if (!access.ok()) {
    TLOG_ERROR("error: %s\n", access.status().ToString().c_str());
    return 2;
  }
  a.server.access = std::move(access).value();
  a.server.http = a.http.Limits();
  if (a.disagg) {
    if (Status st = ApplyTierFlags(a); !st.ok()) {  // checked here once; LaunchFor splits the disk budget
      TLOG_ERROR("error: %s\n", st.ToString().c_str());
      return 1;
    }
    return node::RunDisagg(LaunchFor(a));
  }
  node::BlockStopSignals();
  auto model = a.model.Load();
  if (!model.ok()) {
    TLOG_ERROR("error: %s\n", model.status().ToString().c_str());
    return 1;
  }
  auto attention = a.attention.Resolve();
  if (!attention.ok()) {
    TLOG_ERROR("error: %s\n", attention.status().ToString().c_str());
    return 1;
  }
  a.engine.attention = *attention;
  if (Status st = ApplyTierFlags(a); !st.ok()) {
    TLOG_ERROR("error: %s\n", st.ToString().c_str());
    return 1;
  }
  a.engine.threads = a.model.threads;
  const Status flags = a.engine_flags.Apply(&a.engine);
  if (!flags.ok()) return TLOG_ERROR("error: %s\n", flags.message().c_str()), 1;
  a.engine.request_timeout = std::chrono::milliseconds(int64_t(a.request_timeout_s * 1000));
  auto lanes = transfer::ParseTransportKind(a.link.transport);
  if (!lanes.ok()) return TLOG_ERROR("error: %s\n", lanes.status().message().c_str()), 1;
  a.decode.transport = *lanes;
  a.decode.peer_timeout = std::chrono::milliseconds(a.link.peer_timeout_ms);
  a.decode.allow_mixed_numerics = a.link.allow_mixed_numerics;
  a.decode.handoff_timeout = std::chrono::milliseconds(a.handoff_timeout_ms);
  a.decode.discovered = a.discovery.enabled();
  if (!IsDecodeServer(a)) {
    // A colocated server: no engine plane.
  } else if (Status st = transfer::RequireClusterKey(a.link.cluster_key_file, a.link.insecure_no_cluster_key,
                                                     EnginePlaneAddresses(a),
                                                     a.discovery.enabled() ? "tandem serve --discovery" : "tandem serve --prefill");
             !st.ok()) {
    return TLOG_ERROR("error: %s\n", st.message().c_str()), 2;
  } else if (a.link.cluster_key_file.empty()) {
    TLOG_WARN("WARNING: --insecure-no-cluster-key: this decode server sends destinations to whatever answers at its "
              "prefill addresses, unauthenticated (tests only)\n");
  }
  if (!a.link.cluster_key_file.empty()) {
    auto key = transfer::ClusterKey::Load(a.link.cluster_key_file);
    if (!key.ok()) return TLOG_ERROR("error: %s\n", key.status().message().c_str()), 2;
    a.decode.cluster_key = *key;
  }
  if (a.verify == "off") {
    a.decode.verify = transfer::VerifyMode::kOff;
  } else if (a.verify == "sample") {
    a.decode.verify = transfer::VerifyMode::kSample;
  } else if (a.verify == "all") {
    a.decode.verify = transfer::VerifyMode::kAll;
  } else {
    TLOG_ERROR("error: --verify-handoff must be off, sample or all, not '%s'\n", a.verify.c_str());
    return 1;
  }
  node::DecodeNodeOptions no;
  no.engine = a.engine;
  no.server = a.server;
  no.server.on_drain = [] { kill(getpid(), SIGTERM); };  // the same drain as the signal's (WaitForStopSignal)
  if (IsDecodeServer(a)) no.decode = a.decode;
  if (a.discovery.enabled()) {
    auto options = a.discovery.Options();
    if (!options.ok()) return TLOG_ERROR("error: %s\n", options.status().message().c_str()), 2;
    no.discovery = std::move(options).value();
    no.advertise = a.discovery.advertise;
    no.kv_events_port = a.discovery.kv_events_port;
  }
  auto by_kv = a.discovery.ByKvEvents(IsDecodeServer(a), "is for decode servers");
  if (!by_kv.ok()) return TLOG_ERROR("error: %s\n", by_kv.status().message().c_str()), 2;
  no.follow_kv_events = *by_kv;
  no.shutdown_timeout = std::chrono::milliseconds(int64_t(a.shutdown_timeout_s * 1000));
  auto members = node::Membership::Load(a.link.cluster_key_file, a.link.insecure_no_cluster_key,
                                        "tandem serve --discovery");
  if (!members.ok()) return TLOG_ERROR("error: %s\n", members.status().message().c_str()), 2;
  auto started = node::DecodeNode::Start(**model, std::move(no), std::move(members).value());
  if (!started.ok()) return TLOG_ERROR("error: %s\n", started.status().ToString().c_str()), 1;
  node::DecodeNode& node = **started;
  TLOG_INFO("tandem serve: %s on http://%s:%d (%s kernels, %d threads, %lld cache tokens, %s attention)\n",
            (*model)->config().name.c_str(), a.server.host.c_str(), node.port(), kernels::IsaName(kernels::ActiveIsa()),
            a.model.threads, (long long)a.engine.cache_tokens, a.attention.attention.c_str());
  TLOG_INFO("tandem serve: chats are rendered with %s\n", (*model)->chat_format().Describe().c_str());
  TLOG_INFO("tandem serve: numerics %s %s\n", node.engine().numerics().Id().c_str(),
            node.engine().numerics().ToJson().dump().c_str());
  const int sig = node::WaitForStopSignal();
  TLOG_INFO("tandem serve: signal %d, draining in-flight requests\n", sig);
  node.Stop();
  TLOG_INFO("tandem serve: stopped\n");
  return 0;
}

}  // namespace

void RegisterServe(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve the OpenAI-compatible API (colocated engine)");
  a->model.AddTo(cmd);
  AddListen(cmd, &a->server.host, &a->server.port);
  cmd->add_option("--model-id", a->server.model_id, "Model name clients use (default: the model's)");
  a->engine_flags.AddTo(cmd, &a->engine);
  cmd->add_option("--max-waiting", a->engine.max_waiting, "Queued requests before 429")->check(CLI::Range(0, 1 << 20));
  AddRequestTimeout(cmd, &a->request_timeout_s);
  AddShutdownTimeout(cmd, &a->shutdown_timeout_s);
  a->attention.AddTo(cmd);
  cmd->add_option("--prefill", a->decode.prefill_addresses,
                  "Disaggregated decode: prefill engine's UCX address host:port (empty: colocated)");
  cmd->add_option("--verify-handoff", a->verify, "Check handoff digests: off, sample or all");
  a->link.AddTo(cmd);
  cmd->add_flag("!--no-local-prefill", a->decode.local_prefill,
                "With --prefill: while no prefill engine answers, refuse prompts (503) instead of computing them here");
  cmd->add_option("--handoff-timeout-ms", a->handoff_timeout_ms,
                  "Disaggregated: a handoff not committed this long after its destination was sent is aborted "
                  "(its request re-placed or failed)")
      ->check(CLI::Range(int64_t(10), int64_t(3600) * 1000));
  AddSilenceTimeout(cmd, &a->silence_timeout_ms);
  a->access.AddTo(cmd);
  a->http.AddTo(cmd);
  cmd->add_flag("--disagg", a->disagg,
                "Start a prefill engine, a decode server and a router on this host (router on --port)");
  cmd->add_option("--prefill-engines", a->prefill_engines,
                  "With --disagg: how many prefill engines the decode server balances (default 1)")
      ->check(CLI::Range(1, 16));
  cmd->add_option("--decode-servers", a->decode_servers,
                  "With --disagg: how many decode servers the router balances (and moves streams between; default 1)")
      ->check(CLI::Range(1, 16));
  cmd->add_option("--restart-budget", a->restart_budget,
                  "With --disagg: a child that exits by itself is restarted; more than this many restarts of one "
                  "child within a minute stop the launcher (exit 1)")
      ->check(CLI::Range(0, 1000));
  cmd->add_option("--children-host", a->children_host,
                  "With --disagg: the address the prefill engines and decode servers listen on (default 127.0.0.1: "
                  "only the router, on --host, is reachable from other hosts)");
  cmd->add_flag("--debug-fault-control", a->fault_control,
                "With --disagg, tests and soaks only: the launcher kills, restarts (optionally with bit flips), drains "
                "and stops its prefill engines, decode servers and router when asked over HTTP (bench agentic "
                "--faults uses it)");
  a->tiers.AddTo(cmd);
  a->faults.AddTo(cmd);
  a->discovery.AddTo(cmd, /*registers=*/true);
  AddLogLevel(cmd, &a->log_level);
  cmd->callback([a] { SetExitCode(RunServe(*a)); });
}

}  // namespace tandem::cli
