// `tandem router`: the public OpenAI endpoint in front of decode servers.
#include <signal.h>

#include <cstdio>
#include <memory>

#include "node/stop_signals.h"
#include "bin/access_flags.h"
#include "bin/discovery_flags.h"
#include "bin/model_options.h"
#include "bin/http_flags.h"
#include "bin/commands.h"
#include "bin/shared_flags.h"
#include "common/log.h"
#include "node/router_node.h"
#include "router/router.h"
#include "transfer/cluster_key.h"

namespace tandem::cli {

void RegisterRouter(CLI::App& app) {
  auto o = std::make_shared<RouterOptions>();
  auto level = std::make_shared<std::string>("info");
  auto access = std::make_shared<AccessFlags>();
  auto http = std::make_shared<HttpFlags>();
  auto found = std::make_shared<DiscoveryFlags>();
  auto prompt_model = std::make_shared<std::string>();
  auto chat_template = std::make_shared<std::string>();
  auto cluster_key_file = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("router", "Route OpenAI requests to disaggregated decode servers");
  AddListen(cmd, &o->host, &o->port);
  cmd->add_option("--decode", o->backends,
                  "Decode server host:port (repeatable or comma-separated; needed unless --discovery)")
      ->delimiter(',');
  AddRequestTimeout(cmd, &o->request_timeout_s);
  cmd->add_option("--max-moves", o->max_moves,
                  "Times a request may move to another decode server when its own fails or breaks its stream off "
                  "(the stream goes on where it stopped); 0: fail fast")
      ->check(CLI::Range(0, 16));
  auto move_wait_ms = std::make_shared<int64_t>(o->move_wait.count());  // kept alive by the callback
  cmd->add_option("--move-wait-ms", *move_wait_ms, "How long a move may wait for a healthy decode server")
      ->check(CLI::Range(int64_t(0), int64_t(600'000)));
  auto silence_ms = std::make_shared<int64_t>(o->silence_timeout.count());
  AddSilenceTimeout(cmd, silence_ms.get());
  cmd->add_option("--supervisor-state", o->supervisor_state,
                  "Set by serve --disagg: its supervisor's state file, shown in /health and /metrics");
  AddLogLevel(cmd, level.get());
  found->AddTo(cmd, /*registers=*/false);
  cmd->add_option("-m,--model", *prompt_model,
                  "With --discovery: the decode servers' GGUF file, to tokenize prompts here and place each where "
                  "the decode servers' KV events say its longest prefix is cached");
  cmd->add_option("--chat-template", *chat_template, "With -m: the decode servers' --chat-template, if they have one");
  auto insecure = std::make_shared<bool>(false);
  AddClusterKey(cmd, cluster_key_file.get(), insecure.get());
  access->AddTo(cmd);
  http->AddTo(cmd);
  auto shutdown_s = std::make_shared<double>(30);
  AddShutdownTimeout(cmd, shutdown_s.get());
  cmd->callback([o, level, access, http, shutdown_s, move_wait_ms, silence_ms, found, prompt_model, chat_template,
                 cluster_key_file, insecure] {
    if (!StartLog("router", *level)) return SetExitCode(2);
    if (o->backends.empty() && !found->enabled()) {
      TLOG_ERROR("error: the router needs --decode HOST:PORT or --discovery etcd://HOST:PORT/PREFIX\n");
      return SetExitCode(2);
    }
    node::RouterNodeOptions no;
    if (found->enabled()) {
      if (Status st = transfer::RequireClusterKey(*cluster_key_file, *insecure, {}, "tandem router --discovery"); !st.ok()) {
        TLOG_ERROR("error: %s\n", st.message().c_str());
        return SetExitCode(2);
      }
      if (cluster_key_file->empty()) {
        TLOG_WARN("WARNING: --insecure-no-cluster-key: the router takes decode servers registered at loopback "
                  "addresses unsigned, whoever wrote them into etcd (tests only)\n");
      }
      auto options = found->Options();
      if (!options.ok()) {
        TLOG_ERROR("error: %s\n", options.status().message().c_str());
        return SetExitCode(2);
      }
      no.discovery = std::move(options).value();
    }
    // The key matters only to what discovery brings (records, KV events): without it, none is read.
    auto members = found->enabled()
                       ? node::Membership::Load(*cluster_key_file, *insecure, "tandem router --discovery")
                       : StatusOr<node::Membership>(node::Membership(transfer::ClusterKey{}, false, "tandem router"));
    if (!members.ok()) {
      TLOG_ERROR("error: %s\n", members.status().message().c_str());
      return SetExitCode(2);
    }
    auto by_kv = found->ByKvEvents(!prompt_model->empty(), "needs -m (the model, to tokenize prompts as the decode servers do)");
    if (!by_kv.ok()) {
      TLOG_ERROR("error: %s\n", by_kv.status().message().c_str());
      return SetExitCode(2);
    }
    std::unique_ptr<Model> model;
    if (*by_kv) {
      ModelOptions mo;
      mo.model_path = *prompt_model;
      mo.chat_template_path = *chat_template;
      mo.pack_weights = false;  // the tokenizer and the weights identity only
      auto loaded = mo.Load();
      if (!loaded.ok()) {
        TLOG_ERROR("error: %s\n", loaded.status().message().c_str());
        return SetExitCode(2);
      }
      if (auto keys = members->KvKeys(); !keys.ok()) {  // the KV events' keys: checked here, made again by the node
        TLOG_ERROR("error: %s\n", keys.status().message().c_str());
        return SetExitCode(2);
      }
      model = std::move(loaded).value();
      no.prompt_model = model.get();
    }
    o->move_wait = std::chrono::milliseconds(*move_wait_ms);
    o->silence_timeout = std::chrono::milliseconds(*silence_ms);
    auto policy = access->Load();
    if (!policy.ok()) {
      TLOG_ERROR("error: %s\n", policy.status().ToString().c_str());
      return SetExitCode(2);
    }
    o->access = std::move(policy).value();
    o->http = http->Limits();
    no.router = *o;
    node::BlockStopSignals();
    auto started = node::RouterNode::Start(std::move(no), std::move(members).value());
    if (!started.ok()) {
      TLOG_ERROR("error: %s\n", started.status().message().c_str());
      return SetExitCode(1);
    }
    node::RouterNode& router = **started;
    if (router.by_kv_events()) {
      TLOG_INFO("tandem router: placing requests by the decode servers' KV events (prompts tokenized with %s)\n",
                prompt_model->c_str());
    }
    TLOG_INFO("tandem router: http://%s:%d -> %zu decode backend(s)%s\n", o->host.c_str(), router.port(),
              o->backends.size(), found->enabled() ? (" and those registered at " + found->url).c_str() : "");
    node::WaitForStopSignal();
    TLOG_INFO("tandem router: draining (up to %.0f s)\n", *shutdown_s);
    router.Stop(std::chrono::milliseconds(int64_t(*shutdown_s * 1000)));
    TLOG_INFO("tandem router: stopped\n");
  });
}

}  // namespace tandem::cli
