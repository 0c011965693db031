// `tandem serve`: the colocated OpenAI-compatible server (prefill and decode
// in one engine). SIGTERM or SIGINT: stop admitting, let in-flight requests
// finish (up to --shutdown-timeout), exit 0.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "bin/attention_flags.h"
#include "bin/discovery_flags.h"
#include "bin/stop_signals.h"
#include "bin/commands.h"
#include "common/log.h"
#include "bin/fault_flags.h"
#include "bin/tier_flags.h"
#include "bin/disagg_launcher.h"
#include "bin/model_options.h"
#include "kernels/cpu.h"
#include "decode/decode_role.h"
#include "bin/access_flags.h"
#include "bin/http_flags.h"
#include "server/http_server.h"

namespace tandem::cli {
namespace {

struct ServeArgs {
  ModelOptions model;
  ServerOptions server;
  AccessFlags access;
  HttpFlags http;
  EngineOptions engine;
  decode::DecodeOptions decode;  // the decode role, with --prefill
  std::string prefill_order;  // empty: the default, arrival (on the prefill engine too)
  std::string log_level = "info";
  AttentionFlags attention;
  double request_timeout_s = 600, shutdown_timeout_s = 30;
  bool no_prefix_cache = false;
  std::string verify = "all";
  bool disagg = false;
  int prefill_engines = 1;     // --disagg
  int decode_servers = 1;      // --disagg
  int restart_budget = 5;      // --disagg
  std::string children_host = "127.0.0.1";  // --disagg: where the engines and decode servers listen
  bool fault_control = false;  // --disagg, --debug-fault-control
  TierFlags tiers;
  FaultFlags faults;  // the transport's: --disagg, passed to the prefill engines
  std::string transport = "auto";
  int64_t peer_timeout_ms = 5000;
  int64_t handoff_timeout_ms = 60000;
  int64_t silence_timeout_ms = 5000;  // --disagg: the router's
  std::string cluster_key_file;
  bool insecure_no_cluster_key = false;  // with --prefill
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

// A decode server in discovery: registers itself, and links to every prefill
// engine registered that matches it (besides any --prefill given).
struct KvPlane {  // a decode server's KV events: its own, and its prefill engines' it follows
  std::unique_ptr<discovery::KvEventPublisher> publisher;
  std::unique_ptr<CachedPrefixes> cached;
  std::unique_ptr<discovery::KvEventSubscriber> subscriber;
};

Status StartDiscovery(ServeArgs& a, const Model& model, Engine& engine, decode::DecodeRole& role, int port,
                      discovery::Discovery& found, KvPlane& kv) {
  TANDEM_ASSIGN_OR_RETURN(decode::PrefillLinksOptions links, decode::DecodeRole::LinksOptions(model, a.engine, a.decode));
  discovery::EngineRecord me;
  me.role = "decode";
  me.address = *a.discovery.Advertised(a.server.host, port);
  me.instance = 0;
  me.layout = links.layout_fingerprint;
  me.weights = links.weights_identity;
  me.numerics = engine.numerics().Id();
  me.instance = role.instance_id();
  if (kv.publisher) {
    me.kv_topic = kv.publisher->topic();
    me.kv_events = kv.publisher->events_endpoint();
    me.kv_snapshot = kv.publisher->snapshot_endpoint();
  }
  found.Register([me, &engine] {
    discovery::EngineRecord now = me;
    const EngineStats s = engine.Stats();
    now.load = s.running + s.waiting;
    return now;
  });
  discovery::EngineRecord want;
  want.layout = links.layout_fingerprint;
  want.weights = links.weights_identity;
  want.transport = transfer::TransportFamily(a.decode.transport);
  const std::vector<std::string> fixed = links.addresses;
  discovery::KvEventSubscriber* subscriber = kv.subscriber.get();
  found.Watch("prefill", [&role, want, fixed, subscriber](const std::vector<discovery::EngineRecord>& records) {
    std::vector<std::string> addresses = MatchingAddresses(records, want);
    for (const std::string& f : fixed) {
      if (std::find(addresses.begin(), addresses.end(), f) == addresses.end()) addresses.push_back(f);
    }
    if (subscriber != nullptr) subscriber->SetSources(KvSources(records, addresses));
    role.SetPrefillAddresses(std::move(addresses));
  });
  return Status::Ok();
}

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
DisaggLaunch LaunchFor(const ServeArgs& a) {
  DisaggLaunch l;
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
  l.decode_args = {"--cache-tokens", std::to_string(a.engine.cache_tokens), "--max-running",
                   std::to_string(a.engine.max_running), "--max-waiting", std::to_string(a.engine.max_waiting),
                   "--request-timeout", std::to_string(a.request_timeout_s), "--verify-handoff", a.verify,
                   "--step-time-ms", std::to_string(a.engine.step_time.count()), "--loop-watchdog-ms",
                   std::to_string(a.engine.loop_watchdog.count())};
  if (!a.server.model_id.empty()) l.decode_args.insert(l.decode_args.end(), {"--model-id", a.server.model_id});
  for (auto* side : {&l.decode_args, &l.router_args}) {
    side->insert(side->end(), {"--shutdown-timeout", std::to_string(a.shutdown_timeout_s)});
  }
  if (a.no_prefix_cache) l.decode_args.push_back("--no-prefix-cache");
  // One --cache-tokens sizes both engines' pools.
  l.prefill_args = {"--chunk-size", std::to_string(a.engine.chunk_size), "--cache-tokens", std::to_string(a.engine.cache_tokens)};
  if (!a.prefill_order.empty()) l.prefill_args.insert(l.prefill_args.end(), {"--prefill-order", a.prefill_order});
  if (a.engine.context_tokens > 0) {
    // Both sides: a prompt the decode server accepts must fit the prefill engine's context too.
    for (auto* side : {&l.decode_args, &l.prefill_args}) {
      side->insert(side->end(), {"--ctx-size", std::to_string(a.engine.context_tokens)});
    }
  }
  l.decode_args.insert(l.decode_args.end(), {"--handoff-timeout-ms", std::to_string(a.handoff_timeout_ms)});
  l.router_args.insert(l.router_args.end(), {"--silence-timeout-ms", std::to_string(a.silence_timeout_ms)});
  for (auto* side : {&l.decode_args, &l.prefill_args}) {  // the prefill engine draws each first token
    side->insert(side->end(), {"--grammar-work-per-step", std::to_string(a.engine.grammar_work_per_step)});
    side->insert(side->end(), {"--grammar-time-share", std::to_string(a.engine.grammar_time_share)});
  }
  // (A bad name is the children's to refuse, with the reason.)
  if (auto kind = transfer::ParseTransportKind(a.transport); kind.ok()) l.transport = *kind;
  l.prefill_engines = a.prefill_engines;
  l.decode_servers = a.decode_servers;
  if (!a.decode.local_prefill) l.decode_args.push_back("--no-local-prefill");
  l.fault_control = a.fault_control;
  l.cluster_key_file = a.cluster_key_file;
  for (auto* side : {&l.prefill_args, &l.decode_args, &l.router_args}) side->insert(side->end(), {"--log-level", a.log_level});
  for (auto* side : {&l.decode_args, &l.router_args}) {  // the router passes the client's key on
    for (const std::string& arg : a.access.Args()) side->push_back(arg);
    for (const std::string& arg : a.http.Args()) side->push_back(arg);
  }
  for (auto* side : {&l.prefill_args, &l.decode_args}) {
    side->insert(side->end(), {"--transport", a.transport, "--peer-timeout-ms", std::to_string(a.peer_timeout_ms)});
  }
  for (const std::string& arg : a.faults.TransportArgs()) l.prefill_args.push_back(arg);
  if (a.decode.allow_mixed_numerics) {
    for (auto* side : {&l.prefill_args, &l.decode_args}) side->push_back("--allow-mixed-numerics");
  }
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
      t.disk_cache_dir += "/" + PrefillEngineName(i);
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
  if (!a.cluster_key_file.empty() && !a.disagg && !IsDecodeServer(a)) {
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
    return RunDisagg(LaunchFor(a));
  }
  BlockStopSignals();
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
  auto order = ParsePrefillOrder(a.prefill_order.empty() ? "arrival" : a.prefill_order);
  if (!order.ok()) return TLOG_ERROR("error: %s\n", order.status().message().c_str()), 1;
  a.engine.prefill_order = *order;
  a.engine.prefix_cache = !a.no_prefix_cache;
  a.engine.request_timeout = std::chrono::milliseconds(int64_t(a.request_timeout_s * 1000));
  auto lanes = transfer::ParseTransportKind(a.transport);
  if (!lanes.ok()) return TLOG_ERROR("error: %s\n", lanes.status().message().c_str()), 1;
  a.decode.transport = *lanes;
  a.decode.peer_timeout = std::chrono::milliseconds(a.peer_timeout_ms);
  a.decode.handoff_timeout = std::chrono::milliseconds(a.handoff_timeout_ms);
  a.decode.discovered = a.discovery.enabled();
  if (!IsDecodeServer(a)) {
    // A colocated server: no engine plane.
  } else if (Status st = transfer::RequireClusterKey(a.cluster_key_file, a.insecure_no_cluster_key,
                                                     EnginePlaneAddresses(a),
                                                     a.discovery.enabled() ? "tandem serve --discovery" : "tandem serve --prefill");
             !st.ok()) {
    return TLOG_ERROR("error: %s\n", st.message().c_str()), 2;
  } else if (a.cluster_key_file.empty()) {
    TLOG_WARN("WARNING: --insecure-no-cluster-key: this decode server sends destinations to whatever answers at its "
              "prefill addresses, unauthenticated (tests only)\n");
  }
  if (!a.cluster_key_file.empty()) {
    auto key = transfer::ClusterKey::Load(a.cluster_key_file);
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
  // KV events: this server's prefix cache published, its prefill engines' followed.
  KvPlane kv;
  if (a.discovery.enabled()) {
    auto publisher = StartKvPublisher(a.discovery, a.server.host, a.cluster_key_file);
    if (!publisher.ok()) return TLOG_ERROR("error: %s\n", publisher.status().message().c_str()), 1;
    kv.publisher = std::move(publisher).value();
    a.engine.prefix_events = kv.publisher->Hook();
  }
  auto by_kv = a.discovery.ByKvEvents(IsDecodeServer(a), "is for decode servers");
  if (!by_kv.ok()) return TLOG_ERROR("error: %s\n", by_kv.status().message().c_str()), 2;
  if (*by_kv) {
    auto keys = KvKeys(a.cluster_key_file);
    if (!keys.ok()) return TLOG_ERROR("error: %s\n", keys.status().message().c_str()), 2;
    kv.cached = std::make_unique<CachedPrefixes>();
    auto subscriber = discovery::KvEventSubscriber::Start(*kv.cached, *keys);
    if (!subscriber.ok()) return TLOG_ERROR("error: %s\n", subscriber.status().message().c_str()), 1;
    kv.subscriber = std::move(subscriber).value();
    a.decode.cached = kv.cached.get();
  }
  // Colocated, or the decode role: prompts are computed by the prefill engines and handed off.
  std::unique_ptr<EngineRole> role = std::make_unique<EngineRole>();
  decode::DecodeRole* decode_role = nullptr;
  if (IsDecodeServer(a)) {
    auto decode = decode::DecodeRole::Connect(**model, a.engine, a.decode);
    if (!decode.ok()) {
      TLOG_ERROR("error: %s\n", decode.status().ToString().c_str());
      return 1;
    }
    decode_role = decode->get();
    role = std::move(decode).value();
  }
  auto engine = Engine::Create(**model, a.engine, std::move(role));
  if (!engine.ok()) {
    TLOG_ERROR("error: %s\n", engine.status().ToString().c_str());
    return 1;
  }
  a.server.on_drain = [] { kill(getpid(), SIGTERM); };  // the same drain as the signal's (WaitForStopSignal)
  std::unique_ptr<discovery::Discovery> found;
  if (a.discovery.enabled()) {
    auto started = a.discovery.Start(a.cluster_key_file, a.insecure_no_cluster_key, "tandem serve --discovery");
    if (!started.ok()) return TLOG_ERROR("error: %s\n", started.status().message().c_str()), 2;
    found = std::move(started).value();
    a.server.discovery_health = [d = found.get()] { return d->Health(); };
    a.server.discovery_metrics = [d = found.get(), s = kv.subscriber.get()] {
      return d->MetricsText() + (s != nullptr ? s->MetricsText() : std::string());
    };
  }
  HttpServer server(**engine, **model, a.server);
  if (Status st = server.Start(); !st.ok()) {
    TLOG_ERROR("error: %s\n", st.ToString().c_str());
    return 1;
  }
  if (found) {
    if (Status st = StartDiscovery(a, **model, **engine, *decode_role, server.port(), *found, kv); !st.ok()) {
      TLOG_ERROR("error: %s\n", st.ToString().c_str());
      return 1;
    }
  }
  TLOG_INFO("tandem serve: %s on http://%s:%d (%s kernels, %d threads, %lld cache tokens, %s attention)\n",
               (*model)->config().name.c_str(), a.server.host.c_str(), server.port(),
               kernels::IsaName(kernels::ActiveIsa()), a.model.threads, (long long)a.engine.cache_tokens,
               a.attention.attention.c_str());
  TLOG_INFO("tandem serve: chats are rendered with %s\n", (*model)->chat_format().Describe().c_str());
  TLOG_INFO("tandem serve: numerics %s %s\n", (*engine)->numerics().Id().c_str(),
            (*engine)->numerics().ToJson().dump().c_str());
  const int sig = WaitForStopSignal();
  TLOG_INFO("tandem serve: signal %d, draining in-flight requests\n", sig);
  if (found) found->Stop();  // leave the router's list first: no new requests come while draining
  (*engine)->Shutdown(std::chrono::milliseconds(int64_t(a.shutdown_timeout_s * 1000)));
  server.Stop();
  TLOG_INFO("tandem serve: stopped\n");
  return 0;
}

}  // namespace

void RegisterServe(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve the OpenAI-compatible API (colocated engine)");
  a->model.AddTo(cmd);
  cmd->add_option("--host", a->server.host, "Address to listen on");
  cmd->add_option("--port", a->server.port, "Port (0: any free port)")->check(CLI::Range(0, 65535));
  cmd->add_option("--model-id", a->server.model_id, "Model name clients use (default: the model's)");
  cmd->add_option("--ctx-size", a->engine.context_tokens, "Context tokens per sequence (default: the model's)");
  cmd->add_option("--cache-tokens", a->engine.cache_tokens, "Page pool size in tokens")->check(CLI::Range(int64_t(64), int64_t(1) << 30));
  cmd->add_option("--max-running", a->engine.max_running, "Sequences in the decode batch")->check(CLI::Range(1, 4096));
  cmd->add_option("--max-waiting", a->engine.max_waiting, "Queued requests before 429")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--chunk-size", a->engine.chunk_size, "Prefill tokens per sequence per step")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--prefill-order", a->prefill_order,
                  "Which prompts' chunks a step serves first: arrival (default; bounds the tail) or shortest "
                  "(the oldest, then shortest remaining); with --disagg, the prefill engine's");
  cmd->add_option("--max-batch-tokens", a->engine.max_batch_tokens, "Tokens per step")->check(CLI::Range(1, 1 << 20));
  cmd->add_option_function<int64_t>(
         "--step-time-ms", [a](int64_t ms) { a->engine.step_time = std::chrono::milliseconds(ms); },
         "Beside decoding sequences, prompt chunks are sized from measured throughput so a step takes about this "
         "long: what a burst of prompts may add to inter-token latency (default 200; 0: only --max-batch-tokens)")
      ->check(CLI::Range(int64_t(0), int64_t(600000)));
  cmd->add_option_function<int64_t>(
         "--loop-watchdog-ms", [a](int64_t ms) { a->engine.loop_watchdog = std::chrono::milliseconds(ms); },
         "While one step of the engine loop runs longer than this, /health answers 503 'stalled' with the reason "
         "(a router stops placing requests here) (default 15000; 0: off)")
      ->check(CLI::Range(int64_t(0), int64_t(3'600'000)));
  cmd->add_option("--grammar-work-per-step", a->engine.grammar_work_per_step,
                  "Structured outputs: grammar work (about a nanosecond a unit) all token masks of one step may take; a mask "
                  "that needs more finishes in later steps")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  cmd->add_option("--grammar-time-share", a->engine.grammar_time_share,
                  "Structured outputs: and at most this fraction of a step's model time, when sequences "
                  "computed in it (what one request's masks may add to everyone's inter-token latency)")
      ->check(CLI::Range(0.001, 100.0));
  cmd->add_option("--request-timeout", a->request_timeout_s, "Seconds before a request is failed")->check(CLI::PositiveNumber);
  cmd->add_option("--shutdown-timeout", a->shutdown_timeout_s, "Seconds to drain on SIGTERM")->check(CLI::NonNegativeNumber);
  a->attention.AddTo(cmd);
  cmd->add_flag("--no-prefix-cache", a->no_prefix_cache, "Disable prefix reuse");
  cmd->add_option("--prefill", a->decode.prefill_addresses,
                  "Disaggregated decode: prefill engine's UCX address host:port (empty: colocated)");
  cmd->add_option("--verify-handoff", a->verify, "Check handoff digests: off, sample or all");
  cmd->add_option("--transport", a->transport,
                  "Disaggregated: how handoff bytes travel: auto (what UCX finds), shm (one host) or tcp");
  cmd->add_option("--peer-timeout-ms", a->peer_timeout_ms,
                  "Disaggregated: a prefill engine silent this long is declared dead (its connection closed)")
      ->check(CLI::Range(int64_t(100), int64_t(3600) * 1000));
  cmd->add_flag("!--no-local-prefill", a->decode.local_prefill,
                "With --prefill: while no prefill engine answers, refuse prompts (503) instead of computing them here");
  cmd->add_option("--handoff-timeout-ms", a->handoff_timeout_ms,
                  "Disaggregated: a handoff not committed this long after its destination was sent is aborted "
                  "(its request re-placed or failed)")
      ->check(CLI::Range(int64_t(10), int64_t(3600) * 1000));
  cmd->add_option("--silence-timeout-ms", a->silence_timeout_ms,
                  "With --disagg: the router moves a request whose decode server has sent it nothing this long while "
                  "that server does not answer its health checks (or says its loop is stalled), its stream resumed; "
                  "0: never")
      ->check(CLI::Range(int64_t(0), int64_t(600'000)));
  a->access.AddTo(cmd);
  cmd->add_flag("--allow-mixed-numerics", a->decode.allow_mixed_numerics,
                "With --prefill or --disagg: link to prefill engines whose numerics identity differs (another "
                "build, during a rolling upgrade); answers then equal no colocated run exactly, and /v1/models says "
                "so (a mixed identity: verification judges them as drift)");
  cmd->add_flag("--insecure-no-cluster-key", a->insecure_no_cluster_key,
                "INSECURE, tests only: with --prefill, run without --cluster-key-file (loopback prefill addresses only)");
  cmd->add_option("--cluster-key-file", a->cluster_key_file,
                  "With --prefill: a secret (16+ bytes) the prefill engines must prove; with --disagg: the engines' "
                  "shared secret (default: a fresh random one)");
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
