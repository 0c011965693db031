#include "runtime/generator.h"

#include <chrono>

#include "common/env.h"
#include "runtime/stop_strings.h"

namespace tandem {
namespace {

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(Env::Default().Now() - t0).count();
}

}  // namespace

Generator::Generator(const Model& model, const CacheSpec& spec, ThreadPool& threads,
                     int64_t ctx_tokens)
    : model_(model),
      ctx_tokens_(ctx_tokens),
      pool_(spec.registry, int(model.config().n_layers), (ctx_tokens + kPageTokens - 1) / kPageTokens),
      forward_(model, spec, threads) {}

StatusOr<GenerateResult> Generator::Run(std::span<const int32_t> prompt,
                                        const GenerateOptions& opt,
                                        const std::function<bool(std::string_view)>& on_text) {
  TANDEM_RETURN_IF_ERROR(opt.sampling.Validate());
  if (prompt.empty()) return InvalidArgument("the prompt has no tokens");
  if (int64_t(prompt.size()) >= ctx_tokens_) {
    return InvalidArgument("the prompt has " + std::to_string(prompt.size()) +
                           " tokens; the context holds " + std::to_string(ctx_tokens_));
  }
  if (opt.max_tokens < 0) return InvalidArgument("max_tokens must be >= 0");
  if (opt.chunk_size <= 0) return InvalidArgument("chunk_size must be > 0");
  TANDEM_ASSIGN_OR_RETURN(std::vector<int32_t> pages, pool_.Allocate(pool_.free_pages()));
  struct Release {
    PagePool& pool;
    std::vector<int32_t>& pages;
    ~Release() { pool.Release(pages); }
  } release{pool_, pages};

  GenerateResult result;
  result.prompt_tokens = int64_t(prompt.size());
  std::vector<int32_t> seq(prompt.begin(), prompt.end());
  std::vector<float> logits;
  auto t0 = Env::Default().Now();
  for (size_t start = 0; start < prompt.size(); start += size_t(opt.chunk_size)) {
    const size_t len = std::min(size_t(opt.chunk_size), prompt.size() - start);
    SequenceChunk chunk{prompt.subspan(start, len), int64_t(start), pages, false};
    logits.clear();
    TANDEM_RETURN_IF_ERROR(forward_.Run({&chunk, 1}, pool_, &logits));
  }
  result.prefill_seconds = Since(t0);
  t0 = Env::Default().Now();
  StreamDecoder decoder(model_.tokenizer());
  StopStringMatcher stops(opt.stop_strings);
  auto emit = [&](const std::string& text) {
    result.text += text;
    return text.empty() || !on_text || on_text(text);
  };
  while (int32_t(result.tokens.size()) < opt.max_tokens && int64_t(seq.size()) < ctx_tokens_) {
    const int64_t pos = int64_t(seq.size());
    const int32_t tok = sampler_.Sample(logits, opt.sampling, seq, pos, int64_t(prompt.size()));
    if (!opt.ignore_eos && model_.tokenizer().IsEndOfGeneration(tok)) {
      result.finish = FinishReason::kStop;
      break;
    }
    result.tokens.push_back(tok);
    seq.push_back(tok);
    const bool keep_going = emit(stops.Push(decoder.Push(tok)));
    if (stops.stopped() || !keep_going) {
      result.finish = FinishReason::kStop;
      break;
    }
    if (int32_t(result.tokens.size()) == opt.max_tokens || int64_t(seq.size()) == ctx_tokens_) break;
    SequenceChunk step{std::span<const int32_t>(&seq.back(), 1), pos, pages, false};
    logits.clear();
    TANDEM_RETURN_IF_ERROR(forward_.Run({&step, 1}, pool_, &logits));
  }
  if (!stops.stopped()) emit(stops.Push(decoder.Flush()) + stops.Flush());
  result.decode_seconds = Since(t0);
  return result;
}

}  // namespace tandem
