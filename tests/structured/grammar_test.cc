// Structured outputs below the engine: the byte grammar, the JSON-schema
// compiler (checked against python3-jsonschema on random schemas), and the
// token mask that keeps an answer inside its grammar and its budget.
#include "structured/grammar.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "structured/json_schema.h"
#include "runtime/sampler.h"
#include "structured/token_constraint.h"
#include "support/process.h"
#include "support/test_models.h"
#include "runtime/random_schema.h"

namespace tandem {
namespace {

using OJson = nlohmann::ordered_json;

std::shared_ptr<const Grammar> Schema(const std::string& json) {
  auto g = CompileJsonSchema(OJson::parse(json));
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? *g : nullptr;
}

bool Matches(const Grammar& g, std::string_view text) {
  Grammar::State s = g.Start(), next;
  for (char c : text) {
    if (!g.Advance(s, uint8_t(c), &next)) return false;
    std::swap(s, next);
  }
  return g.Accepting(s);
}

std::string Refusal(const std::string& json) {
  auto g = CompileJsonSchema(OJson::parse(json));
  return g.ok() ? "compiled" : g.status().message();
}

TEST(Grammar, LeftRecursionAndRulesThatNeverFinishAreRefused) {
  GrammarBuilder a;
  const int32_t r = a.Rule();
  a.Alternative(r, {r, a.Byte('x')});
  a.Alternative(r, {a.Byte('y')});
  EXPECT_FALSE(std::move(a).Build(r).ok());
  GrammarBuilder b;
  const int32_t loop = b.Rule();
  b.Alternative(loop, {b.Byte('x'), loop});  // never ends
  EXPECT_FALSE(std::move(b).Build(loop).ok());
}

TEST(Grammar, RepetitionStaysFlatAndCountsTheFewestBytesLeft) {
  GrammarBuilder b;
  const int32_t digits = b.Rule();
  b.Alternative(digits, {b.Set(ByteSet().Add('0', '9')), digits});
  b.Alternative(digits, {});
  const int32_t root = b.Rule();
  GrammarBuilder::Sequence seq;
  b.Literal(seq, "[");
  seq.push_back(digits);
  b.Literal(seq, "]");
  b.Alternative(root, seq);
  auto g = *std::move(b).Build(root);
  Grammar::State s = g->Start(), next;
  EXPECT_EQ(g->MinBytesToAccept(s), 2);
  ASSERT_TRUE(g->Advance(s, '[', &next));
  std::swap(s, next);
  size_t stack = 0;
  for (int i = 0; i < 1000; ++i) {  // a thousand digits: the stack does not grow
    ASSERT_TRUE(g->Advance(s, uint8_t('0' + i % 10), &next));
    std::swap(s, next);
    if (i == 0) stack = s.stacks.back().size();
    EXPECT_EQ(s.stacks.back().size(), stack);
  }
  EXPECT_EQ(g->MinBytesToAccept(s), 1);
  EXPECT_FALSE(g->Advance(s, 'x', &next));
  ASSERT_TRUE(g->Advance(s, ']', &next));
  EXPECT_TRUE(g->Finished(next));
}

TEST(JsonSchema, ObjectsWriteTheirPropertiesInSchemaOrderAndMayLeaveOutOptionalOnes) {
  auto g = Schema(R"({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}},"required":["b"]})");
  EXPECT_TRUE(Matches(*g, R"({"b":1})"));
  EXPECT_TRUE(Matches(*g, R"({"b":-12,"a":"x"})"));
  EXPECT_FALSE(Matches(*g, R"({"a":"x","b":1})"));
  EXPECT_FALSE(Matches(*g, R"({})"));
  EXPECT_FALSE(Matches(*g, R"({"b":01})"));
  EXPECT_FALSE(Matches(*g, R"({"b":1,})"));
  EXPECT_FALSE(Matches(*g, R"({"b":1} )"));
  auto all_optional = Schema(R"({"type":"object","properties":{"x":{"type":"null"},"y":{"type":"boolean"}}})");
  for (const char* ok : {"{}", R"({"x":null})", R"({"y":true})", R"({"x":null,"y":false})"}) {
    EXPECT_TRUE(Matches(*all_optional, ok)) << ok;
  }
  EXPECT_FALSE(Matches(*all_optional, R"({,"y":true})"));
}

TEST(JsonSchema, StringsTakeEscapesAndWellFormedUtf8Only) {
  auto g = Schema(R"({"type":"string"})");
  for (const char* ok : {R"("")", R"("a\"b")", R"("\u00e9\n")", "\"\xC3\xA9\xF0\x9F\x98\x80\""}) {
    EXPECT_TRUE(Matches(*g, ok)) << ok;
  }
  for (const char* bad : {R"("\ud800")", "\"\xC0\x80\"", "\"a\nb\"", R"("\x")", "\"\xED\xA0\x80\""}) {
    EXPECT_FALSE(Matches(*g, bad)) << bad;
  }
  auto bounded = Schema(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_FALSE(Matches(*bounded, R"("a")"));
  EXPECT_TRUE(Matches(*bounded, "\"a\xC3\xA9\""));  // two characters, three bytes
  EXPECT_TRUE(Matches(*bounded, R"("a\"c")"));
  EXPECT_FALSE(Matches(*bounded, R"("abcd")"));
}

TEST(JsonSchema, NumbersEnumsConstsAnyOfArraysAndRecursiveRefs) {
  auto n = Schema(R"({"type":"number"})");
  for (const char* ok : {"0", "-0.5", "12e+3", "3.25E-07"}) EXPECT_TRUE(Matches(*n, ok)) << ok;
  for (const char* bad : {"01", "1.", ".5", "1e", "1e123", "+1", "NaN"}) EXPECT_FALSE(Matches(*n, bad)) << bad;
  auto e = Schema(R"({"type":"string","enum":["a",1,"b"]})");  // 1 is not a string: never written
  EXPECT_TRUE(Matches(*e, R"("b")"));
  EXPECT_FALSE(Matches(*e, "1"));
  auto c = Schema(R"({"const":{"k":[1,"x"]}})");
  EXPECT_TRUE(Matches(*c, R"({"k":[1,"x"]})"));
  auto any = Schema(R"({"anyOf":[{"type":"integer"},{"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":2}]})");
  for (const char* ok : {"7", "[true]", "[true,false]"}) EXPECT_TRUE(Matches(*any, ok)) << ok;
  for (const char* bad : {"[]", "[true,true,true]", "[1]"}) EXPECT_FALSE(Matches(*any, bad)) << bad;
  auto list = Schema(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"]}},"$ref":"#/$defs/node"})");
  EXPECT_TRUE(Matches(*list, R"({"v":1,"next":{"v":2,"next":{"v":3,"next":null}}})"));
  EXPECT_FALSE(Matches(*list, R"({"v":1,"next":{"v":2}})"));
}

TEST(JsonSchema, WhatTheSubsetCannotHonourIsRefusedByName) {
  EXPECT_NE(Refusal(R"({"type":"string","pattern":"^a"})").find("'pattern' (at #) is not supported"), std::string::npos);
  EXPECT_NE(Refusal(R"({"type":"object","properties":{"n":{"type":"integer","minimum":1}}})")
                .find("'minimum' (at #/properties/n) is not supported"),
            std::string::npos);
  for (const char* kw : {"format", "oneOf", "allOf", "not", "multipleOf", "uniqueItems", "prefixItems"}) {
    const std::string json = std::string(R"({")") + kw + R"(":1})";
    EXPECT_NE(Refusal(json).find(std::string("'") + kw + "'"), std::string::npos) << kw;
  }
  EXPECT_NE(Refusal(R"({"$ref":"#/nowhere"})").find("points at nothing"), std::string::npos);
  EXPECT_NE(Refusal(R"({"$ref":"#"})").find("cannot be generated"), std::string::npos);  // left-recursive
  EXPECT_NE(Refusal(R"({"type":"array","maxItems":100000})").find("maxItems"), std::string::npos);
  EXPECT_NE(Refusal(R"(false)").find("no value satisfies it"), std::string::npos);
  EXPECT_NE(Refusal(R"({"type":"object","required":["x"],"additionalProperties":false})").find("'x'"), std::string::npos);
  // enum and const with other keywords would let through values those keywords reject.
  EXPECT_NE(Refusal(R"({"enum":["a","bbb"],"minLength":2})").find("'minLength' beside 'enum'"), std::string::npos);
  EXPECT_NE(Refusal(R"({"const":[1,2,3],"maxItems":1})").find("'maxItems' beside 'const'"), std::string::npos);
  // Size: a grammar stays under 2^18 symbols however the schema repeats itself.
  nlohmann::ordered_json types = nlohmann::ordered_json::array();
  for (int i = 0; i < 1000; ++i) types.push_back("string");
  EXPECT_EQ(Refusal(nlohmann::ordered_json{{"type", types}, {"maxLength", 4096}}.dump()), "compiled");  // one type, once
  nlohmann::ordered_json props = nlohmann::ordered_json::object();
  for (int i = 0; i < 200; ++i) props["p" + std::to_string(i)] = {{"type", "string"}, {"maxLength", 4096}};
  EXPECT_NE(Refusal(nlohmann::ordered_json{{"type", "object"}, {"properties", props}}.dump()).find("too large"),
            std::string::npos);
}

// Forced tool calls: each tool's parameters are their own root (their $refs
// resolve there), and "required" with parallel calls allows several.
TEST(JsonSchema, ToolCallConstraintsResolveEachToolsOwnRefsAndTakeSeveralCalls) {
  const OJson spec = OJson::parse(R"({"tools": [
      {"name": "tree", "parameters": {"type": "object", "properties": {"child": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
                                      "required": ["child"]}},
      {"name": "pick", "parameters": {"$defs": {"c": {"enum": ["red", "blue"]}}, "type": "object",
                                      "properties": {"color": {"$ref": "#/$defs/c"}}, "required": ["color"]}}],
    "key": "arguments", "max_calls": 3, "call_prefix": "<tool_call>", "call_suffix": "</tool_call>", "separator": "\n"})");
  auto g = CompileConstraint("tool_calls " + spec.dump());
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(Matches(**g, R"(<tool_call>{"name":"tree","arguments":{"child":{"child":null}}}</tool_call>)"));
  EXPECT_TRUE(Matches(**g, "<tool_call>{\"name\":\"pick\",\"arguments\":{\"color\":\"red\"}}</tool_call>\n"
                           "<tool_call>{\"name\":\"tree\",\"arguments\":{\"child\":null}}</tool_call>"));
  EXPECT_FALSE(Matches(**g, R"(<tool_call>{"name":"pick","arguments":{"color":"green"}}</tool_call>)"));
  EXPECT_FALSE(Matches(**g, R"(<tool_call>{"name":"tree","arguments":{"child":{"name":"tree","arguments":{}}}}</tool_call>)"));
  EXPECT_FALSE(Matches(**g, ""));
  OJson bad = spec;
  bad["tools"][1]["parameters"]["properties"]["color"] = {{"type", "string"}, {"format", "color"}};
  auto refused = CompileConstraint("tool_calls " + bad.dump());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("tool 'pick' parameters: 'format'"), std::string::npos)
      << refused.status().message();
}

// A long enum is a byte trie: every value is reachable, and values sharing a
// prefix stay one parse until they part.
TEST(JsonSchema, LongEnumsKeepEveryValueReachable) {
  nlohmann::ordered_json values = nlohmann::ordered_json::array();
  for (int i = 0; i < 1000; ++i) values.push_back("code-" + std::to_string(i * 37));
  values.push_back(12);
  values.push_back(nullptr);
  auto g = CompileJsonSchema(nlohmann::ordered_json{{"enum", values}});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  for (int i : {0, 1, 500, 999}) EXPECT_TRUE(Matches(**g, "\"code-" + std::to_string(i * 37) + "\"")) << i;
  EXPECT_TRUE(Matches(**g, "12"));
  EXPECT_TRUE(Matches(**g, "null"));
  EXPECT_FALSE(Matches(**g, "\"code-1\""));
  Grammar::State s = (*g)->Start(), next;
  for (char c : std::string("\"code-")) {
    ASSERT_TRUE((*g)->Advance(s, uint8_t(c), &next));
    std::swap(s, next);
  }
  EXPECT_LE(s.stacks.size(), 10u) << "one parse per next digit, not per value";
}

// Random walks through the grammar, each byte chosen among those that still
// let the answer finish within its budget: every walk ends complete, and the
// reference validator accepts every text.
TEST(JsonSchema, RandomWalksOnRandomSchemasAreAcceptedByPythonJsonschema) {
  if (testing::RunShell("python3 -c 'import jsonschema'", 30).exit_code != 0) {
    GTEST_SKIP() << "SKIPPED LOUDLY: python3-jsonschema is not installed: the reference validator is missing";
  }
  const std::string dir = testing::MakeTempDir();
  std::ofstream cases(dir + "/cases.jsonl");
  std::mt19937 rng(11);
  testing::RandomSchema schemas(5);
  int written = 0;
  for (int i = 0; i < 300; ++i) {
    const OJson schema = schemas.Make();
    auto g = CompileJsonSchema(schema);
    ASSERT_TRUE(g.ok()) << g.status().ToString() << " " << schema.dump();
    const int64_t budget = (*g)->MinBytesToAccept((*g)->Start()) + int64_t(rng() % 40);
    Grammar::State s = (*g)->Start(), next;
    std::string text;
    for (int64_t left = budget; !(*g)->Finished(s);) {
      if ((*g)->Accepting(s) && (left == 0 || rng() % 4 == 0)) break;
      std::vector<uint8_t> ok;
      for (int c = 0; c < 256; ++c) {
        if ((*g)->Advance(s, uint8_t(c), &next) && (*g)->MinBytesToAccept(next) <= left - 1) ok.push_back(uint8_t(c));
      }
      ASSERT_FALSE(ok.empty()) << "stuck after '" << text << "' with " << left << " left: " << schema.dump();
      const uint8_t c = ok[rng() % ok.size()];
      ASSERT_TRUE((*g)->Advance(s, c, &next));
      std::swap(s, next);
      text += char(c);
      --left;
    }
    ASSERT_TRUE((*g)->Accepting(s)) << text;
    cases << nlohmann::json({{"schema", nlohmann::json::parse(schema.dump())}, {"text", text}}).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    ++written;
  }
  cases.close();
  const auto r = testing::RunShell("python3 " + std::string(TANDEM_SOURCE_DIR) + "/tests/runtime/validate_json.py < " +
                                       dir + "/cases.jsonl | grep -v '^ok$' | head -5; echo checked",
                                   120);
  EXPECT_EQ(r.output, "checked\n") << r.output;
  EXPECT_EQ(written, 300);
}

// The token mask over a real vocab: sampled from random logits, every answer
// is complete and parses, however small the budget the schema allows.
TEST(TokenConstraint, SampledAnswersFinishInsideTheirBudget) {
  auto model = testing::MakePresetModel("tiny", TensorType::kF32);
  const Tokenizer& tok = model->model->tokenizer();
  ConstraintCache cache(tok);
  const std::string constraint =
      R"(json_schema {"type":"object","properties":{"name":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}},"n":{"type":"integer"}},"required":["name","tags","n"]})";
  auto g = CompileConstraint(constraint);
  ASSERT_TRUE(g.ok());
  const int64_t least = (*g)->MinBytesToAccept((*g)->Start());
  Sampler sampler;
  std::mt19937 rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    auto c = cache.Start(constraint);
    ASSERT_TRUE(c.ok());
    const int64_t budget = least + trial;
    std::vector<float> logits(size_t(tok.vocab_size()));
    std::vector<int32_t> history;
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = uint64_t(trial);
    std::string text;
    bool ended = false;
    for (int64_t i = 0; i < budget; ++i) {
      for (float& l : logits) l = std::normal_distribution<float>(0, 3)(rng);
      const TokenMask& allowed = (*c)->Allowed(budget - i);
      ASSERT_TRUE(std::any_of(allowed.begin(), allowed.end(), [](uint64_t w) { return w != 0; })) << text;
      const int32_t t = sampler.Sample(logits, p, history, int64_t(i), 0, &allowed);
      if (tok.IsEndOfGeneration(t)) {
        ended = true;
        break;
      }
      history.push_back(t);
      text += tok.TokenBytes(t);
      (*c)->Accept(t);
      if ((*c)->finished()) {
        ended = true;
        break;
      }
    }
    EXPECT_TRUE(ended || (*c)->min_tokens() == 0) << text;
    EXPECT_TRUE(Matches(**g, text)) << text;
    const auto parsed = nlohmann::json::parse(text, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << text;
    EXPECT_TRUE(parsed["name"].is_string() && parsed["tags"].is_array() && parsed["n"].is_number_integer()) << text;
  }
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// Answers that keep many long parses alive (deep nesting inside an ambiguous
// schema) would make one mask walk take seconds of the engine loop and their
// cache keys megabytes: the nesting a state may reach is capped (deeper
// brackets are not allowed, so the answer closes), and past the work bound
// the request fails and says why, in bounded time.
TEST(TokenConstraint, DeepAmbiguousAnswersStayBoundedInWorkAndNesting) {
  auto model = testing::MakePresetModel("tiny", TensorType::kF32);
  const Tokenizer& tok = model->model->tokenizer();
  nlohmann::ordered_json any = nlohmann::ordered_json::array();
  for (int k = 1; k <= 60; ++k) {
    any.push_back({{"type", "array"}, {"items", {{"$ref", "#/$defs/n"}}}, {"maxItems", k}});
  }
  any.push_back({{"type", "string"}});
  ConstraintCache cache(tok);
  auto c = cache.Start("json_schema " + nlohmann::ordered_json{{"$defs", {{"n", {{"anyOf", any}}}}}, {"$ref", "#/$defs/n"}}.dump());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const int32_t open = *tok.FindToken("[");
  const auto t0 = std::chrono::steady_clock::now();
  int depth = 0;
  for (; depth < 1000; ++depth) {
    const TokenMask& allowed = (*c)->Allowed(100000);
    if (!(*c)->status().ok()) break;
    if (!((allowed[size_t(open) >> 6] >> (open & 63)) & 1)) break;  // nesting capped: '[' no longer allowed
    (*c)->Accept(open);
  }
  EXPECT_LT(depth, 1000) << "nesting was never bounded";
  if ((*c)->status().ok()) {
    EXPECT_GT((*c)->min_tokens(), 0) << "the answer can still be closed";
  } else {
    EXPECT_NE((*c)->status().message().find("too many parses"), std::string::npos) << (*c)->status().message();
  }
  std::cout << "[ bounded ] stopped at depth " << depth << " (" << ((*c)->status().ok() ? "nesting cap" : "work bound")
            << ") after " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s\n";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));  // a bound, not a benchmark
}

}  // namespace
}  // namespace tandem
