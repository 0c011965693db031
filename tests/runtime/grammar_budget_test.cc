// Structured outputs' grammar work (issue 26, "one structured-output request
// can slow every user"): a token's mask is a walk that can be sliced across
// engine steps with the same result, and a mask past its bound ends its
// request with a clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "runtime/json_schema.h"
#include "runtime/request.h"
#include "runtime/sampler.h"
#include "runtime/token_constraint.h"
#include "support/test_models.h"

namespace tandem {
namespace {

using testing::MakePresetModel;

// Arrays nested through a $ref, each level ambiguous between 60 lengths, or a
// string: every '[' keeps up to 256 parses alive, one level deeper.
std::string RecursiveSchema() {
  nlohmann::ordered_json any = nlohmann::ordered_json::array();
  for (int k = 1; k <= 60; ++k) {
    any.push_back({{"type", "array"}, {"items", {{"$ref", "#/$defs/n"}}}, {"maxItems", k}});
  }
  any.push_back({{"type", "string"}});
  // An array at the root: with ']' banned the answer never closes.
  return nlohmann::ordered_json{
      {"$defs", {{"n", {{"anyOf", any}}}}}, {"type", "array"}, {"items", {{"$ref", "#/$defs/n"}}}}
      .dump();
}

// The worst case: choice `seed` of an n=16 request whose logit_bias favours
// '[' and bans every token that closes an array, so the answer keeps going
// deeper, every token into a state never seen.
RequestSpec WorstCase(const Tokenizer& tok, uint64_t seed) {
  RequestSpec s;
  s.prompt = tok.Encode("Nest as deep as you can.", tok.add_bos(), false);
  s.max_tokens = 3000;
  s.sampling.temperature = 1.0f;
  s.sampling.seed = seed;
  s.sampling.constraint = "json_schema " + RecursiveSchema();
  s.sampling.answer_budget = s.max_tokens;
  s.sampling.logit_bias.push_back({*tok.FindToken("["), 4.0f});
  for (int32_t t = 0; t < tok.vocab_size(); ++t) {
    if (tok.TokenBytes(t).find(']') != std::string::npos)
      s.sampling.logit_bias.push_back({t, -30.0f});
  }
  return s;
}

// The walk behind a mask stops between two advances and resumes: sliced
// finely, it gives the same masks (and the same failure, at the same work)
// as in one go, along a forced answer that ends past the work bound.
TEST(TokenConstraint, ASlicedMaskIsTheSameMask) {
  auto m = MakePresetModel("tiny", TensorType::kF32);
  const Tokenizer& tok = m->model->tokenizer();
  const RequestSpec spec = WorstCase(tok, 3);
  ConstraintCache whole_cache(tok), sliced_cache(tok);
  auto whole = whole_cache.Start(spec.sampling.constraint);
  auto sliced = sliced_cache.Start(spec.sampling.constraint);
  ASSERT_TRUE(whole.ok() && sliced.ok());
  std::mt19937 rng(5);
  Sampler sampler;
  std::vector<float> logits(size_t(tok.vocab_size()));
  std::vector<int32_t> history;
  int positions = 0, most_slices = 0;
  for (; positions < 3000; ++positions) {
    const int64_t budget = 3000 - positions;
    int64_t whole_work = 0, sliced_work = 0;
    const TokenMask* a =
        (*whole)->Allowed(budget, std::numeric_limits<int64_t>::max(), &whole_work);
    const TokenMask* b = nullptr;
    int slices = 0;
    for (; slices < 100000 && b == nullptr && (*sliced)->status().ok(); ++slices) {
      b = (*sliced)->Allowed(budget, 20000, &sliced_work);
    }
    most_slices = std::max(most_slices, slices);
    ASSERT_EQ(a == nullptr, b == nullptr) << "position " << positions;
    EXPECT_EQ((*whole)->status().message(), (*sliced)->status().message());
    if (a == nullptr) break;
    ASSERT_EQ(*a, *b) << "position " << positions;
    EXPECT_EQ(whole_work, sliced_work) << "position " << positions;
    // Drawn as the engine would, from random logits under the worst case's
    // logit_bias: deeper, into new states.
    for (float& l : logits) l = std::normal_distribution<float>(0, 1)(rng);
    const int32_t t = sampler.Sample(logits, spec.sampling, history, positions, 0, a);
    history.push_back(t);
    (*whole)->Accept(t);
    (*sliced)->Accept(t);
  }
  EXPECT_GT(most_slices, 100) << "the slices were too large to test resuming";
  EXPECT_NE((*sliced)->status().message().find("exceeded its per-step work budget"),
            std::string::npos)
      << "after " << positions << " tokens: " << (*sliced)->status().message();
}

}  // namespace
}  // namespace tandem
