#include "loadgen/grammar_load.h"

#include <nlohmann/json.hpp>

namespace tandem::loadgen {

std::string RecursiveArraySchema() {
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

RequestSpec GrammarWorstCase(const Tokenizer& tok, uint64_t seed, int32_t max_tokens) {
  RequestSpec s;
  s.prompt = tok.Encode("Nest as deep as you can.", tok.add_bos(), false);
  s.max_tokens = max_tokens;
  s.sampling.temperature = 1.0f;
  s.sampling.seed = seed;
  s.sampling.constraint = "json_schema " + RecursiveArraySchema();
  s.sampling.answer_budget = s.max_tokens;
  if (auto open = tok.FindToken("[")) s.sampling.logit_bias.push_back({*open, 4.0f});
  for (int32_t t = 0; t < tok.vocab_size(); ++t) {
    if (tok.TokenBytes(t).find(']') != std::string::npos) s.sampling.logit_bias.push_back({t, -30.0f});
  }
  return s;
}

RequestSpec OrdinaryRequest(const Tokenizer& tok, int i, int32_t max_tokens) {
  RequestSpec s;
  s.prompt = tok.Encode("Ordinary request " + std::to_string(i) + ", please answer.", tok.add_bos(), false);
  s.max_tokens = max_tokens;
  s.sampling.temperature = 0.8f;
  s.sampling.seed = uint64_t(100 + i);
  if (i % 4 == 3) {
    s.sampling.constraint =
        R"(json_schema {"type":"object","properties":{"name":{"type":"string","maxLength":20},"n":{"type":"integer"}},"required":["name","n"]})";
    s.sampling.answer_budget = s.max_tokens;
  } else {
    s.ignore_eos = true;
  }
  return s;
}

}  // namespace tandem::loadgen
