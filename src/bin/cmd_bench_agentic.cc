// `tandem bench agentic`: its flags (the benchmark: bench/agentic.h).
#include "bin/commands.h"
#include "bin/shared_flags.h"
#include "bin/model_options.h"
#include "bench/agentic.h"

namespace tandem::cli {

using bench::AgenticBenchOptions;

void RegisterAgenticBench(CLI::App& bench) {
  auto a = std::make_shared<AgenticBenchOptions>();
  CLI::App* cmd = bench.add_subcommand("agentic", "Multi-turn agent sessions, a concurrency sweep, the exact oracle");
  ModelOptions::AddTo(cmd, &a->model);
  AddServerUrl(cmd, &a->url)->required();
  cmd->add_option("--preset", a->preset, "small, medium, incident or production");
  cmd->add_option("--initial-tokens", a->initial_tokens, "Context a session starts with")->check(CLI::Range(16, 1 << 22));
  cmd->add_option("--rounds", a->rounds, "Rounds per session")->check(CLI::Range(1, 100000));
  cmd->add_option("--gen-tokens", a->gen_tokens, "Tokens generated per round")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--tool-tokens", a->tool_tokens, "Tool-result size range MIN,MAX in tokens")->delimiter(',');
  cmd->add_option("--think-ms", a->think_ms, "Pause between rounds, up to this")->check(CLI::Range(0, 3600000));
  cmd->add_option("--sweep", a->sweep, "Concurrent sessions per point, e.g. 16,32,48,64,80")->delimiter(',');
  cmd->add_option("--trace", a->trace,
                  "Replay a published trace instead of the preset's sessions: Mooncake's request JSONL (timestamp, "
                  "input_length, output_length, hash_ids) or multi-turn conversations ({session_id, turns: [{text, "
                  "output_length, delay}]}), verified and reported like a sweep point");
  cmd->add_option("--trace-format", a->trace_format, "mooncake or conversations (default: told by the first line)");
  cmd->add_option("--trace-speed", a->trace_speed,
                  "The trace's arrival times divided by this (2: twice as fast; 0: every request as soon as a worker "
                  "is free)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--trace-scale", a->trace_scale,
                  "Every trace length (and Mooncake's 512-token block) times this, for small models")
      ->check(CLI::Range(1e-3, 16.0));
  cmd->add_option("--trace-limit", a->trace_limit, "Replay at most this many requests (0: all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--trace-workers", a->trace_workers, "Sessions in flight at most (client threads)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--trace-max-s", a->trace_max_s,
                  "Refuse a trace whose arrivals and delays at --trace-speed span more than this many seconds")
      ->check(CLI::Range(1.0, 7 * 86400.0));
  cmd->add_option("--seed", a->seed, "Seed of every prompt");
  cmd->add_option("--round-timeout", a->request_timeout_s, "Seconds one round may take (client side)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--recovery-timeout", a->health_timeout_s,
                  "Seconds the server may take to return to baseline (the health gate)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--out-dir", a->out_dir, "Where transcript.jsonl, report.json and report.svg go");
  cmd->add_flag("--no-verify", a->no_verify, "Do not replay answers on the reference engine");
  AddReference(cmd, &a->reference_url, &a->near_tie_nats);
  cmd->add_option("--soak", a->soak_s,
                  "Soak for this many seconds instead of the sweep: sessions back to back at the last --sweep value "
                  "while --faults run; outcomes are reported by fault window and quiet period")
      ->check(CLI::Range(1.0, 7.0 * 24 * 3600));
  cmd->add_option("--faults", a->faults,
                  "With --soak: KIND:TARGET@AT[+FOR][/RATE],... kinds kill, wedge, bit-flips, drain (TARGET: prefill "
                  "engine), decode-kill, decode-drain, decode-wedge (TARGET: decode server), router-kill, router-drain "
                  "and abort-storm (TARGET: requests), e.g. kill:0@30+5,wedge:1@90+12,abort-storm:64@150,bit-flips:0@210+30/0.05");
  cmd->add_option("--faults-repeat", a->faults_repeat_s, "With --soak: run the --faults schedule again every this many seconds")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--fault-control", a->fault_control,
                  "With --soak: host:port of the launcher's fault control (serve --disagg --debug-fault-control)");
  cmd->add_option("--fault-control-key-file", a->fault_control_key_file,
                  "With --fault-control: the file holding its key (the launcher names it when it starts)");
  cmd->add_option("--fault-settle", a->fault_settle_s,
                  "With --soak: seconds after a fault ends that still count as its window")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--verify-during", a->verify_during,
                "Verify each point's rounds while the next point runs (the sweep ends verified; the reference engine "
                "then competes with the server for the cores)");
  cmd->add_flag("--quiet", a->quiet, "No progress bar");
  cmd->add_flag("--plain-openai", a->plain_openai,
                "Send only standard OpenAI fields (no ignore_eos / return_token_ids); answers are judged by text");
  cmd->callback([a] { SetExitCode(bench::RunAgenticBench(*a)); });
}

}  // namespace tandem::cli
