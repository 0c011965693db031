// `tandem prefill`: a prefill engine. Decode engines connect over UCX, send
// Destinations, and receive each prompt's cache and its first token.
#include <signal.h>

#include <cstdio>
#include <memory>

#include "bin/attention_flags.h"
#include "bin/discovery_flags.h"
#include "node/stop_signals.h"
#include "bin/commands.h"
#include "bin/shared_flags.h"
#include "bin/engine_flags.h"
#include "bin/link_flags.h"
#include "node/prefill_node.h"
#include "common/log.h"
#include "bin/tier_flags.h"
#include "bin/model_options.h"
#include "kernels/cpu.h"
#include "prefill/prefill_server.h"
#include "transfer/handshake.h"
#include "bin/fault_flags.h"
#include "transfer/transport_kind.h"

namespace tandem::cli {
namespace {

struct PrefillArgs {
  ModelOptions model;
  std::string host = "127.0.0.1";
  int port = 0;
  AttentionFlags attention;
  // A prefill engine's own defaults: smaller chunks and steps than a colocated server's.
  EngineOptions engine = [] {
    EngineOptions e;
    e.chunk_size = 512;
    e.max_batch_tokens = 2048;
    return e;
  }();
  EngineFlags engine_flags;
  std::string log_level = "info";
  int64_t max_queue = 256;
  LinkFlags link;
  TierFlags tiers;
  FaultFlags faults;
  DiscoveryFlags discovery;
};

int RunPrefill(PrefillArgs& a) {
  if (!StartLog("prefill", a.log_level)) return 2;
  if (Status st = transfer::RequireClusterKey(a.link.cluster_key_file, a.link.insecure_no_cluster_key,
                                              {a.host + ":" + std::to_string(a.port)}, "tandem prefill");
      !st.ok()) {
    return TLOG_ERROR("error: %s\n", st.message().c_str()), 2;
  }
  if (a.link.cluster_key_file.empty()) {
    TLOG_WARN("WARNING: --insecure-no-cluster-key: any local process can connect to this prefill engine as a decode "
              "engine and have cache pages written where it says (tests only)\n");
  }
  if (a.discovery.enabled()) {
    if (auto advertised = a.discovery.Advertised(a.host, a.port); !advertised.ok()) {
      return TLOG_ERROR("error: %s\n", advertised.status().message().c_str()), 2;
    }
  }
  node::BlockStopSignals();
  auto model = a.model.Load();
  if (!model.ok()) return TLOG_ERROR("error: %s\n", model.status().ToString().c_str()), 1;
  auto attention = a.attention.Resolve();
  if (!attention.ok()) return TLOG_ERROR("error: %s\n", attention.status().ToString().c_str()), 1;
  PrefillOptions po;
  po.engine = a.engine;
  po.engine.attention = *attention;
  if (Status st = a.engine_flags.Apply(&po.engine); !st.ok()) return TLOG_ERROR("error: %s\n", st.message().c_str()), 1;
  po.engine.threads = a.model.threads;
  po.engine.request_timeout = std::chrono::hours(24);  // each handoff's own time budget is its deadline
  po.max_queue = size_t(a.max_queue);
  po.peer_timeout = std::chrono::milliseconds(a.link.peer_timeout_ms);
  po.heartbeat_interval = transfer::HeartbeatInterval(po.peer_timeout);
  po.allow_mixed_numerics = a.link.allow_mixed_numerics;
  if (!a.link.cluster_key_file.empty()) {
    auto key = transfer::ClusterKey::Load(a.link.cluster_key_file);
    if (!key.ok()) return TLOG_ERROR("error: %s\n", key.status().message().c_str()), 2;
    po.cluster_key = *key;
  }
  auto tiers = a.tiers.Resolve();
  if (!tiers.ok()) return TLOG_ERROR("error: %s\n", tiers.status().ToString().c_str()), 1;
  po.engine.tiers = *tiers;
  auto faults = a.faults.Resolve(a.tiers.enabled());  // tests only
  if (!faults.ok()) return TLOG_ERROR("error: %s\n", faults.status().ToString().c_str()), 1;
  faults->ApplyTo(&po.engine);
  auto lanes = transfer::ParseTransportKind(a.link.transport);
  if (!lanes.ok()) return TLOG_ERROR("error: %s\n", lanes.status().message().c_str()), 1;
  node::PrefillNodeOptions no;
  no.prefill = std::move(po);
  no.host = a.host;
  no.port = a.port;
  no.transport_kind = *lanes;
  if (a.discovery.enabled()) {
    auto options = a.discovery.Options();
    if (!options.ok()) return TLOG_ERROR("error: %s\n", options.status().message().c_str()), 2;
    no.discovery = std::move(options).value();
    no.advertise = a.discovery.advertise;
    no.kv_events_port = a.discovery.kv_events_port;
  }
  // Faults of the handoff (tests only): each accepted connection is wrapped.
  if (faults->transport_any()) {
    no.make_wrap = [&a, &faults](PrefillEngine& worker) -> StatusOr<PrefillServer::Wrap> {
      std::vector<std::pair<const uint8_t*, size_t>> index_k;
      if (faults->unsafe_early_commit) {
        // The production bug as a transport fault: index-K writes are not
        // covered by the flush the Commit waits for.
        auto b = worker.engine().cache_spec().registry.Find("index_k");
        if (!b.ok()) return InvalidArgument("--debug-unsafe-early-commit needs sparse attention (an index-K buffer)");
        index_k = worker.engine().BufferMemory(*b);
        TLOG_WARN("WARNING: --debug-unsafe-early-commit: index-K writes are NOT covered by the flush before each "
                  "commit. Decode engines may read index-K before it lands. This reproduces a production "
                  "corruption bug on purpose; never use it outside tests.\n");
      }
      TLOG_WARN("WARNING: injecting transfer faults (put delay %lld us, bit flip rate %g, wedge after %lld "
                "messages): tests only\n",
                (long long)a.faults.put_delay_us, a.faults.bit_flip_rate, (long long)a.faults.wedge_after_messages);
      return PrefillServer::Wrap([plan = faults->ConnectionPlan(std::move(index_k))](
                                     std::shared_ptr<transfer::Connection> c) -> std::shared_ptr<transfer::Connection> {
        return std::make_shared<faults::FaultyConnection>(std::move(c), plan);
      });
    };
  }
  auto members = node::Membership::Load(a.link.cluster_key_file, a.link.insecure_no_cluster_key,
                                        "tandem prefill --discovery");
  if (!members.ok()) return TLOG_ERROR("error: %s\n", members.status().message().c_str()), 2;
  auto started = node::PrefillNode::Start(**model, std::move(no), std::move(members).value());
  if (!started.ok()) return TLOG_ERROR("error: %s\n", started.status().message().c_str()), 1;
  node::PrefillNode& node = **started;
  PrefillEngine& worker = node.engine();
  TLOG_INFO("tandem prefill: %s, handoffs at %s://%s:%d (%s kernels, %s attention, layout %s, instance %llu)\n",
            (*model)->config().name.c_str(), node.transport_family(), a.host.c_str(), node.port(),
            kernels::IsaName(kernels::ActiveIsa()), a.attention.attention.c_str(), worker.layout_fingerprint().c_str(),
            (unsigned long long)worker.instance_id());
  TLOG_INFO("tandem prefill: numerics %s %s\n", worker.engine().numerics().Id().c_str(),
            worker.engine().numerics().ToJson().dump().c_str());
  node::WaitForStopSignal();
  node.Stop();
  const auto s = worker.stats();
  const EngineStats e = worker.engine().Stats();
  TLOG_INFO("tandem prefill: stopping (%lld committed, %lld aborted, %lld failed, %lld pages in use, %lld held by "
               "the prefix cache; %lld of %lld prompt tokens served from it: prefix hit rate %.1f%%)\n",
               (long long)s.committed, (long long)s.aborted, (long long)s.failed, (long long)s.pages_in_use,
               (long long)s.cached_pages, (long long)s.cached_tokens, (long long)e.prompt_tokens,
               e.prompt_tokens > 0 ? 100.0 * double(s.cached_tokens) / double(e.prompt_tokens) : 0.0);
  return 0;
}

}  // namespace

void RegisterPrefill(CLI::App& app) {
  auto a = std::make_shared<PrefillArgs>();
  CLI::App* cmd = app.add_subcommand("prefill", "Run a prefill engine (decode engines connect over UCX)");
  a->model.AddTo(cmd);
  AddListen(cmd, &a->host, &a->port);
  a->attention.AddTo(cmd);
  a->engine_flags.AddTo(cmd, &a->engine);
  cmd->add_option("--max-queue", a->max_queue, "Handoffs that may wait to be scheduled; more are refused")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  a->link.AddTo(cmd);
  a->tiers.AddTo(cmd);
  a->faults.AddTo(cmd);
  a->discovery.AddTo(cmd, /*registers=*/true);
  AddLogLevel(cmd, &a->log_level);
  cmd->callback([a] { SetExitCode(RunPrefill(*a)); });
}

}  // namespace tandem::cli
