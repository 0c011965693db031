// `tandem generate`: run a prompt through the model and stream the text.
#include <cstdio>
#include <memory>

#include "bin/attention_flags.h"
#include "bin/commands.h"
#include "bin/shared_flags.h"
#include "bin/model_options.h"
#include "kernels/cpu.h"
#include "model/cache_spec.h"
#include "model/chat_template.h"
#include "runtime/generator.h"

namespace tandem::cli {
namespace {

struct GenerateArgs {
  ModelOptions model;
  std::string prompt;
  bool chat = false;
  bool no_bos = false;
  int64_t ctx_size = 0;
  AttentionFlags attention;
  GenerateOptions gen;
};

int RunGenerate(const GenerateArgs& args) {
  auto model = args.model.Load();
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", model.status().ToString().c_str());
    return 1;
  }
  const Model& m = **model;
  const Tokenizer& tok = m.tokenizer();
  std::string text = args.prompt;
  const std::string bos_text = tok.bos_id() >= 0 ? tok.TokenText(tok.bos_id()) : "";
  if (args.chat) {
    const ChatMessage msg{"user", args.prompt};
    auto rendered = m.chat_format().Render({&msg, 1}, nullptr, true, bos_text,
                                           tok.eos_id() >= 0 ? tok.TokenText(tok.eos_id()) : "");
    if (!rendered.ok()) {
      std::fprintf(stderr, "error: %s\n", rendered.status().ToString().c_str());
      return 1;
    }
    text = *rendered;
  }
  // Some chat templates spell BOS themselves; otherwise it comes from the vocab's flag.
  const bool add_bos = !args.no_bos && (args.chat ? ChatFormat::NeedsBos(text, tok.add_bos(), bos_text) : tok.add_bos());
  std::vector<int32_t> prompt = tok.Encode(text, add_bos, args.chat);
  if (prompt.empty() && tok.bos_id() >= 0) prompt.push_back(tok.bos_id());
  const int64_t ctx = args.ctx_size > 0 ? args.ctx_size : m.config().context_length;
  constexpr int64_t kMaxGenerateContext = int64_t(1) << 22;  // its cache is allocated whole, up front
  if (ctx > kMaxGenerateContext) {
    std::fprintf(stderr, "error: --ctx-size %lld: generate holds at most %lld tokens\n", (long long)ctx,
                 (long long)kMaxGenerateContext);
    return 1;
  }
  if (ctx > m.config().context_length) {
    std::fprintf(stderr, "warning: --ctx-size %lld exceeds the model's trained context %lld\n",
                 (long long)ctx, (long long)m.config().context_length);
  }
  auto attention = args.attention.Resolve();
  auto spec = attention.ok() ? MakeCacheSpec(m.config(), *attention) : StatusOr<CacheSpec>(attention.status());
  if (!spec.ok()) {
    std::fprintf(stderr, "error: %s\n", spec.status().ToString().c_str());
    return 1;
  }
  ThreadPool threads(args.model.threads);
  Generator generator(m, *spec, threads, ctx);
  auto result = generator.Run(prompt, args.gen, [](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  std::printf("\n");
  std::fflush(stdout);
  if (!result.ok()) {
    std::fprintf(stderr, "error: %s\n", result.status().ToString().c_str());
    return 1;
  }
  const auto& r = *result;
  std::fprintf(stderr,
               "[%s | %s kernels | %d threads | %s attention] prompt %lld tokens in %.3f s (%.1f tok/s), "
               "generated %zu tokens in %.3f s (%.1f tok/s), finish: %s\n",
               m.config().name.c_str(), kernels::IsaName(kernels::ActiveIsa()), threads.size(),
               args.attention.attention.c_str(),
               (long long)r.prompt_tokens, r.prefill_seconds,
               r.prompt_tokens / std::max(r.prefill_seconds, 1e-9), r.tokens.size(),
               r.decode_seconds, r.tokens.size() / std::max(r.decode_seconds, 1e-9),
               FinishReasonName(r.finish));
  return 0;
}

}  // namespace

void RegisterGenerate(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt");
  args->model.AddTo(cmd);
  cmd->add_option("-p,--prompt", args->prompt, "Prompt text (empty: start from BOS)");
  AddMaxTokens(cmd, &args->gen.max_tokens, /*short_name=*/true);
  cmd->add_option("--temp", args->gen.sampling.temperature, "Temperature (0 = greedy)")->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--seed", args->gen.sampling.seed, "Sampling seed");
  cmd->add_option("--top-k", args->gen.sampling.top_k, "Top-k (0 = off)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", args->gen.sampling.top_p, "Top-p (1 = off)")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--min-p", args->gen.sampling.min_p, "Min-p (0 = off)")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--repeat-penalty", args->gen.sampling.repetition_penalty, "Repetition penalty (1 = off)");
  cmd->add_option("--repeat-last-n", args->gen.sampling.repeat_last_n, "Tokens the penalty looks back");
  cmd->add_option("--stop", args->gen.stop_strings, "Stop string (repeatable)");
  cmd->add_flag("--ignore-eos", args->gen.ignore_eos, "Keep generating past end-of-generation tokens");
  AddChunkSize(cmd, &args->gen.chunk_size);
  AddContextTokens(cmd, &args->ctx_size);
  args->attention.AddTo(cmd);
  cmd->add_flag("--chat", args->chat, "Wrap the prompt in the model's chat template");
  cmd->add_flag("--no-bos", args->no_bos, "Do not prepend the BOS token");
  cmd->callback([args] { SetExitCode(RunGenerate(*args)); });
}

}  // namespace tandem::cli
