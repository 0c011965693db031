// Request parsing and validation shared by both endpoints, and the
// completions prompt. Chat rendering and tools: openai_chat_test.cc.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/openai_api.h"
#include "server/openai_test_util.h"

namespace tandem {
namespace {

using testing_openai::ExpectError;
using testing_openai::ExpectParsed;
using testing_openai::TestModel;
using testing_openai::TestTokenizer;

struct ErrorCase {
  std::string body;
  int http_status;
  std::string message_part;
  std::string param;
};

void ExpectChatErrors(const std::vector<ErrorCase>& cases) {
  const ModelInfo model = TestModel();
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.body);
    const ApiError e = ExpectError(ParseChatCompletionRequest(c.body, model));
    EXPECT_EQ(e.http_status, c.http_status);
    EXPECT_NE(e.message.find(c.message_part), std::string::npos) << e.message;
    EXPECT_EQ(e.param, c.param);
  }
}

std::string Chat(const std::string& extra_fields) {
  return R"({"model": "tiny", "messages": [{"role": "user", "content": "hi"}])" +
         (extra_fields.empty() ? "" : ", " + extra_fields) + "}";
}

TEST(OpenAiRequest, RejectsMalformedBodies) {
  ExpectChatErrors({
      {"{\"model\": ", 400, "request body is not valid JSON: ", ""},
      {"", 400, "request body is not valid JSON", ""},
      {"[1, 2]", 400, "must be a JSON object", ""},
      {R"({"messages": [{"role": "user", "content": "\ud800"}]})", 400, "not valid JSON", ""},
      {std::string(200, '[') + std::string(200, ']'), 400, "nests deeper than 128", ""},
  });
}

TEST(OpenAiRequest, RejectsWrongFieldTypes) {
  ExpectChatErrors({
      {Chat(R"("max_tokens": "10")"), 400, "'max_tokens' must be an integer", "max_tokens"},
      {Chat(R"("max_tokens": 1.5)"), 400, "'max_tokens' must be an integer", "max_tokens"},
      {Chat(R"("max_completion_tokens": true)"), 400, "'max_completion_tokens' must be an integer",
       "max_completion_tokens"},
      {Chat(R"("temperature": "hot")"), 400, "'temperature' must be a number", "temperature"},
      {Chat(R"("top_k": 2.5)"), 400, "'top_k' must be an integer", "top_k"},
      {Chat(R"("stream": "yes")"), 400, "'stream' must be a boolean", "stream"},
      {Chat(R"("stream_options": 1)"), 400, "'stream_options' must be an object", "stream_options"},
      {Chat(R"("stream_options": {"include_usage": 1})"), 400, "include_usage' must be a boolean",
       "stream_options.include_usage"},
      {Chat(R"("ignore_eos": 0)"), 400, "'ignore_eos' must be a boolean", "ignore_eos"},
      {Chat(R"("model": 7)"), 400, "'model' must be a string", "model"},
      {Chat(R"("stop": 5)"), 400, "'stop' must be a string or an array of at most 64", "stop"},
      {Chat(std::string(R"("stop": [)") + [] {
         std::string many;
         for (int i = 0; i < 65; ++i) many += (i ? ", \"" : "\"") + std::to_string(i) + "\"";
         return many;
       }() + "]"),
       400, "at most 64 strings", "stop"},
      {Chat(R"("stop": ["a", 1])"), 400, "at most 64 strings", "stop"},
      // Bounded in bytes, all strings together (runtime/stop_strings.h).
      {Chat(R"("stop": [")" + std::string(4096, 'x') + R"(", ")" + std::string(4097, 'y') + R"("])"), 400,
       "'stop' holds 8193 bytes; at most 8192", "stop"},
      {Chat(R"("seed": -1)"), 400, "'seed' must be a non-negative integer", "seed"},
      {Chat(R"("seed": "1")"), 400, "'seed' must be a non-negative integer", "seed"},
  });
}

TEST(OpenAiRequest, RejectsUnknownModelWith404) {
  const ApiError e = ExpectError(ParseChatCompletionRequest(
      R"({"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]})", TestModel()));
  EXPECT_EQ(e.http_status, 404);
  EXPECT_EQ(e.message, "model 'gpt-4' not found; this server serves 'tiny'");
  EXPECT_EQ(e.code, "model_not_found");
  EXPECT_EQ(e.type, "invalid_request_error");
}

TEST(OpenAiRequest, AcceptsAbsentModelAndIgnoresUnknownFields) {
  const ParsedRequest r = ExpectParsed(ParseChatCompletionRequest(
      R"({"messages": [{"role": "user", "content": "hi"}], "user": "u1",
          "some_extension": {"nested": [1, 2]}, "parallel_tool_calls": true})",
      TestModel()));
  EXPECT_EQ(r.model, "tiny");
  EXPECT_TRUE(r.chat);
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.n, 1);
}

TEST(OpenAiRequest, RejectsOutOfRangeValues) {
  ExpectChatErrors({
      {Chat(R"("max_tokens": 0)"), 400, "'max_tokens' must be between 1 and 512", "max_tokens"},
      {Chat(R"("max_tokens": 513)"), 400, "'max_tokens' must be between 1 and 512", "max_tokens"},
      {Chat(R"("max_tokens": 18446744073709551615)"), 400, "between 1 and 512", "max_tokens"},
      {Chat(R"("max_completion_tokens": -3)"), 400,
       "'max_completion_tokens' must be between 1 and 512", "max_completion_tokens"},
      {Chat(R"("temperature": -0.5)"), 400, "temperature must be in", "temperature"},
      {Chat(R"("temperature": 1000)"), 400, "temperature must be in", "temperature"},
      {Chat(R"("top_p": 0)"), 400, "top_p must be in", "top_p"},
      {Chat(R"("top_p": 1.5)"), 400, "top_p must be in", "top_p"},
      {Chat(R"("top_k": -2)"), 400, "'top_k' must be >= 0", "top_k"},
      {Chat(R"("min_p": 2)"), 400, "min_p must be in", "min_p"},
      {Chat(R"("repetition_penalty": 0)"), 400, "repetition_penalty must be in",
       "repetition_penalty"},
  });
}

TEST(OpenAiRequest, RejectsWhatItCannotHonour) {
  ExpectChatErrors({
      {Chat(R"("n": 17)"), 400, "'n' must be between 1 and 16", "n"},
      {Chat(R"("n": 0)"), 400, "'n' must be between 1 and 16", "n"},
      {Chat(R"("n": "1")"), 400, "'n' must be an integer", "n"},
      {Chat(R"("logprobs": 1)"), 400, "'logprobs' must be a boolean", "logprobs"},
      {Chat(R"("top_logprobs": 3)"), 400, "'top_logprobs' needs 'logprobs': true", "top_logprobs"},
      {Chat(R"("logprobs": true, "top_logprobs": 21)"), 400, "'top_logprobs' must be between 0 and 20",
       "top_logprobs"},
      {Chat(R"("logprobs": true, "top_logprobs": -1)"), 400, "'top_logprobs' must be between 0 and 20",
       "top_logprobs"},
      {Chat(R"("frequency_penalty": 2.5)"), 400, "'frequency_penalty' must be between -2 and 2",
       "frequency_penalty"},
      {Chat(R"("presence_penalty": "high")"), 400, "'presence_penalty' must be a number", "presence_penalty"},
      {Chat(R"("logit_bias": {"x5": 10})"), 400, "'logit_bias' key 'x5' is not a token id", "logit_bias"},
      {Chat(R"("logit_bias": {"999999": 10})"), 400, "is not a token id", "logit_bias"},
      {Chat(R"("logit_bias": {"5": 101})"), 400, "between -100 and 100", "logit_bias"},
      {Chat(R"("logit_bias": [5])"), 400, "must map token ids", "logit_bias"},
      {Chat(R"("response_format": {"type": "xml"})"), 400, "must be \"text\", \"json_object\" or \"json_schema\"",
       "response_format.type"},
      {Chat(R"("response_format": {"type": "json_schema"})"), 400, "must be an object with a 'schema'",
       "response_format.json_schema"},
      {Chat(R"("response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "a+"}}})"),
       400, "'pattern' (at #) is not supported", "response_format"},
      {Chat(R"("max_tokens": 3, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"long_name": {"type": "integer"}}, "required": ["long_name"]}}})"),
       400, "takes 15 tokens, more than max_tokens (3)", "max_tokens"},
  });
  // The same fields at their neutral values are fine.
  const ParsedRequest r = ExpectParsed(ParseChatCompletionRequest(
      Chat(R"("n": 1, "logprobs": false, "frequency_penalty": 0, "presence_penalty": 0.0,
              "logit_bias": {}, "response_format": {"type": "text"}, "top_logprobs": null)"),
      TestModel()));
  EXPECT_EQ(r.n, 1);
}

TEST(OpenAiRequest, LogprobsAskForTheChosenTokenAndTopAlternatives) {
  const ModelInfo m = TestModel();
  EXPECT_EQ(ExpectParsed(ParseChatCompletionRequest(Chat(""), m)).spec.logprobs, -1);
  EXPECT_EQ(ExpectParsed(ParseChatCompletionRequest(Chat(R"("logprobs": false)"), m)).spec.logprobs, -1);
  EXPECT_EQ(ExpectParsed(ParseChatCompletionRequest(Chat(R"("logprobs": true)"), m)).spec.logprobs, 0);
  EXPECT_EQ(ExpectParsed(ParseChatCompletionRequest(Chat(R"("logprobs": true, "top_logprobs": 5)"), m)).spec.logprobs,
            5);
  EXPECT_EQ(ExpectParsed(ParseCompletionRequest(R"({"prompt": "x", "logprobs": 3})", m)).spec.logprobs, 3);
  EXPECT_EQ(ExpectParsed(ParseCompletionRequest(R"({"prompt": "x", "logprobs": null})", m)).spec.logprobs, -1);
  EXPECT_EQ(ExpectParsed(ParseCompletionRequest(R"({"prompt": "x", "logprobs": false})", m)).spec.logprobs, -1);
  // A disaggregated decode server refuses them by name.
  ModelInfo decode = TestModel();
  decode.logprobs = false;
  const ApiError e = ExpectError(ParseChatCompletionRequest(Chat(R"("logprobs": true)"), decode));
  EXPECT_EQ(e.param, "logprobs");
  EXPECT_NE(e.message.find("disaggregated decode server"), std::string::npos) << e.message;
  EXPECT_EQ(ExpectParsed(ParseChatCompletionRequest(Chat(R"("logprobs": false)"), decode)).spec.logprobs, -1);
}

TEST(OpenAiRequest, SamplingDefaultsFollowOpenAi) {
  const ParsedRequest r = ExpectParsed(ParseChatCompletionRequest(Chat(""), TestModel()));
  EXPECT_EQ(r.spec.sampling.temperature, 1.0f);
  EXPECT_EQ(r.spec.sampling.top_p, 1.0f);
  EXPECT_EQ(r.spec.sampling.top_k, 0);
  EXPECT_FALSE(r.has_seed);
  EXPECT_FALSE(r.spec.ignore_eos);
  EXPECT_TRUE(r.spec.stop.empty());
  const int64_t room = 512 - int64_t(r.spec.prompt.size());
  EXPECT_EQ(r.spec.max_tokens, std::min<int64_t>(room, 256));
}

TEST(OpenAiRequest, ReadsSamplingFields) {
  const ParsedRequest r = ExpectParsed(
      ParseChatCompletionRequest(Chat(R"("temperature": 0, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
              "repetition_penalty": 1.1, "seed": 18446744073709551615, "ignore_eos": true,
              "max_tokens": 7)"),
                                 TestModel()));
  EXPECT_EQ(r.spec.sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(r.spec.sampling.top_p, 0.9f);
  EXPECT_EQ(r.spec.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.spec.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r.spec.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(r.spec.sampling.seed, 18446744073709551615ull);
  EXPECT_TRUE(r.has_seed);
  EXPECT_TRUE(r.spec.ignore_eos);
  EXPECT_EQ(r.spec.max_tokens, 7);
  // top_k -1 is how several clients say "off".
  EXPECT_EQ(ExpectParsed(ParseChatCompletionRequest(Chat(R"("top_k": -1)"), TestModel()))
                .spec.sampling.top_k,
            0);
}

TEST(OpenAiRequest, MaxCompletionTokensWinsOverMaxTokens) {
  const ParsedRequest r = ExpectParsed(ParseChatCompletionRequest(
      Chat(R"("max_tokens": 100, "max_completion_tokens": 9)"), TestModel()));
  EXPECT_EQ(r.spec.max_tokens, 9);
}

TEST(OpenAiRequest, StopForms) {
  const ModelInfo m = TestModel();
  EXPECT_EQ(ExpectParsed(ParseChatCompletionRequest(Chat(R"("stop": "END")"), m)).spec.stop,
            std::vector<std::string>{"END"});
  EXPECT_EQ(ExpectParsed(ParseChatCompletionRequest(Chat(R"("stop": ["a", "b\n", "", "ü"])"), m))
                .spec.stop,
            (std::vector<std::string>{"a", "b\n", "ü"}));
  EXPECT_TRUE(
      ExpectParsed(ParseChatCompletionRequest(Chat(R"("stop": null)"), m)).spec.stop.empty());
  EXPECT_TRUE(ExpectParsed(ParseChatCompletionRequest(Chat(R"("stop": [])"), m)).spec.stop.empty());
}

TEST(OpenAiRequest, StreamOptions) {
  const ModelInfo m = TestModel();
  ParsedRequest r = ExpectParsed(ParseChatCompletionRequest(
      Chat(R"("stream": true, "stream_options": {"include_usage": true})"), m));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  // Usage chunks exist only in streams.
  r = ExpectParsed(
      ParseChatCompletionRequest(Chat(R"("stream_options": {"include_usage": true})"), m));
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.include_usage);
}

// ---------------------------------------------------------------- UTF-8

TEST(OpenAiRequest, RejectsInvalidUtf8InRawBody) {
  const ModelInfo m = TestModel();
  const std::vector<std::string> bad = {
      "\xC0\xAF",          // overlong '/'
      "\xE0\x80\xAF",      // overlong, three bytes
      "\xF0\x80\x80\xAF",  // overlong, four bytes
      "\xED\xA0\x80",      // UTF-16 surrogate D800
      "\xED\xBF\xBF",      // surrogate DFFF
      "\xE2\x82",          // truncated euro sign
      "\xF0\x9F\x98",      // truncated emoji
      "\x80",              // lone continuation byte
      "\xF5\x80\x80\x80",  // beyond U+10FFFF
      "\xFF",
  };
  for (const std::string& bytes : bad) {
    SCOPED_TRACE(::testing::PrintToString(bytes));
    const std::string body = R"({"messages": [{"role": "user", "content": "a)" + bytes + R"("}]})";
    const ApiError e = ExpectError(ParseChatCompletionRequest(body, m));
    EXPECT_EQ(e.http_status, 400);
    EXPECT_NE(e.message.find("request body is not valid UTF-8"), std::string::npos) << e.message;
    EXPECT_NE(e.message.find("offset " + std::to_string(body.find(bytes))), std::string::npos)
        << e.message;
  }
}

TEST(OpenAiRequest, AcceptsValidMultiByteText) {
  // "café € 😀 中": two-, three- and four-byte sequences.
  const std::string text = "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xE4\xB8\xAD";
  const ParsedRequest r = ExpectParsed(ParseCompletionRequest(
      R"({"prompt": ")" + text + R"(", "stop": ")" + text + R"("})", TestModel()));
  EXPECT_EQ(TestTokenizer().Decode(r.spec.prompt), text);
  EXPECT_EQ(r.spec.stop, std::vector<std::string>{text});
  // The same characters as \u escapes, the emoji as a surrogate pair.
  const ParsedRequest escaped = ExpectParsed(
      ParseCompletionRequest(R"({"prompt": "caf\u00e9 \u20ac \ud83d\ude00 \u4e2d"})", TestModel()));
  EXPECT_EQ(escaped.spec.prompt, r.spec.prompt);
}

// ---------------------------------------------------------------- completions

TEST(OpenAiCompletion, PromptForms) {
  const ModelInfo m = TestModel();
  const Tokenizer& tok = TestTokenizer();
  const std::vector<int32_t> expected = tok.Encode("Once upon a time", true, true);
  ASSERT_EQ(expected.front(), 1);  // BOS added: the vocab says so
  for (const std::string& prompt :
       {std::string(R"("Once upon a time")"), std::string(R"(["Once upon a time"])")}) {
    SCOPED_TRACE(prompt);
    const ParsedRequest r =
        ExpectParsed(ParseCompletionRequest(R"({"prompt": )" + prompt + "}", m));
    EXPECT_EQ(r.spec.prompt, expected);
    EXPECT_FALSE(r.chat);
  }
  // Token ids are taken as given: no BOS is added to them.
  EXPECT_EQ(ExpectParsed(ParseCompletionRequest(R"({"prompt": [5, 300, 7]})", m)).spec.prompt,
            (std::vector<int32_t>{5, 300, 7}));
  EXPECT_EQ(ExpectParsed(ParseCompletionRequest(R"({"prompt": [[1, 2, 3]]})", m)).spec.prompt,
            (std::vector<int32_t>{1, 2, 3}));
  // An empty string still has its BOS.
  EXPECT_EQ(ExpectParsed(ParseCompletionRequest(R"({"prompt": ""})", m)).spec.prompt,
            std::vector<int32_t>{1});
}

// echo: the prompt text comes back (token ids as their bytes); with logprobs
// the engine reports the prompt's too; max_tokens 0 asks for the prompt alone.
// Chat has no echo, and a disaggregated decode server cannot give it.
TEST(OpenAiCompletion, EchoAsksForThePromptBackAndItsLogprobs) {
  const ModelInfo m = TestModel();
  const ParsedRequest plain = ExpectParsed(ParseCompletionRequest(R"({"prompt": "ab", "echo": true})", m));
  EXPECT_TRUE(plain.echo);
  EXPECT_EQ(plain.echo_text, "ab");
  EXPECT_FALSE(plain.spec.prompt_logprobs);
  const ParsedRequest lp =
      ExpectParsed(ParseCompletionRequest(R"({"prompt": [1, 2, 3], "echo": true, "logprobs": 2, "max_tokens": 0})", m));
  EXPECT_TRUE(lp.spec.prompt_logprobs);
  EXPECT_EQ(lp.spec.max_tokens, 0);
  EXPECT_EQ(lp.spec.logprobs, 2);
  EXPECT_FALSE(lp.echo_text.empty());
  EXPECT_TRUE(ExpectParsed(ParseCompletionRequest(R"({"prompt": "ab", "echo": false})", m)).echo_text.empty());
  const ApiError chat = ExpectError(ParseChatCompletionRequest(
      R"({"messages": [{"role": "user", "content": "hi"}], "echo": true})", m));
  EXPECT_EQ(chat.param, "echo");
  EXPECT_NE(chat.message.find("in chat completions"), std::string::npos) << chat.message;
  ModelInfo disagg = m;
  disagg.logprobs = false;
  const ApiError remote = ExpectError(ParseCompletionRequest(R"({"prompt": "ab", "echo": true})", disagg));
  EXPECT_NE(remote.message.find("disaggregated decode server"), std::string::npos) << remote.message;
}

TEST(OpenAiCompletion, RejectsBadPrompts) {
  const ModelInfo m = TestModel();
  const std::vector<ErrorCase> cases = {
      {R"({"max_tokens": 5})", 400, "'prompt' is required", "prompt"},
      {R"({"prompt": 5})", 400, "'prompt' must be a string, an array of one string", "prompt"},
      {R"({"prompt": []})", 400, "'prompt' must be a string", "prompt"},
      {R"({"prompt": ["a", "b"]})", 400, "batched prompts are not supported", "prompt"},
      {R"({"prompt": [[1], [2]]})", 400, "batched prompts are not supported", "prompt"},
      {R"({"prompt": [1, "a"]})", 400, "'prompt' must be a string", "prompt"},
      {R"({"prompt": [1, 1024]})", 400, "token ids must be integers in [0, 1024)", "prompt"},
      {R"({"prompt": [-1]})", 400, "token ids must be integers in [0, 1024)", "prompt"},
      {R"({"prompt": [1.5]})", 400, "token ids must be integers", "prompt"},
      {R"({"prompt": "x", "echo": "yes"})", 400, "'echo' must be a boolean", "echo"},
      {R"({"prompt": "x", "max_tokens": 0})", 400, "0 only with 'echo'", "max_tokens"},
      {R"({"prompt": "x", "suffix": "y"})", 400, "'suffix' is not supported", "suffix"},
      {R"({"prompt": "x", "best_of": 3})", 400, "'best_of' is not supported", "best_of"},
      {R"({"prompt": "x", "logprobs": 21})", 400, "'logprobs' must be an integer between 0 and 20", "logprobs"},
      {R"({"prompt": "x", "logprobs": true})", 400, "'logprobs' must be an integer", "logprobs"},
      {R"({"prompt": "x", "top_logprobs": 2})", 400, "'top_logprobs' is a chat field", "top_logprobs"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.body);
    const ApiError e = ExpectError(ParseCompletionRequest(c.body, m));
    EXPECT_EQ(e.http_status, c.http_status);
    EXPECT_NE(e.message.find(c.message_part), std::string::npos) << e.message;
    EXPECT_EQ(e.param, c.param);
  }
}

std::string TokenIdsPrompt(int count) {
  std::string ids;
  for (int i = 0; i < count; ++i) ids += (i ? ", " : "") + std::to_string(300 + i % 100);
  return R"({"prompt": [)" + ids + "]";
}

TEST(OpenAiCompletion, ContextLimit) {
  const ModelInfo m = TestModel(ChatTemplateKind::kChatml, 64);
  // 64 prompt tokens leave no room for one more.
  ApiError e = ExpectError(ParseCompletionRequest(TokenIdsPrompt(64) + "}", m));
  EXPECT_EQ(e.http_status, 400);
  EXPECT_NE(e.message.find("the prompt has 64 tokens but the context holds 64"), std::string::npos)
      << e.message;
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_EQ(e.param, "prompt");
  // 63 leave exactly one.
  ParsedRequest r = ExpectParsed(ParseCompletionRequest(TokenIdsPrompt(63) + "}", m));
  EXPECT_EQ(r.spec.max_tokens, 1);
  // max_tokens is clamped to what is left, and defaults to it when small.
  r = ExpectParsed(ParseCompletionRequest(TokenIdsPrompt(10) + R"(, "max_tokens": 64})", m));
  EXPECT_EQ(r.spec.max_tokens, 54);
  r = ExpectParsed(ParseCompletionRequest(TokenIdsPrompt(10) + "}", m));
  EXPECT_EQ(r.spec.max_tokens, 54);
  r = ExpectParsed(ParseCompletionRequest(TokenIdsPrompt(10) + R"(, "max_tokens": 5})", m));
  EXPECT_EQ(r.spec.max_tokens, 5);
}

TEST(OpenAiChat, ContextLimitNamesMessages) {
  const ModelInfo m = TestModel(ChatTemplateKind::kChatml, 32);
  const ApiError e = ExpectError(ParseChatCompletionRequest(
      R"({"messages": [{"role": "user", "content": ")" + std::string(100, 'z') + R"("}]})", m));
  EXPECT_NE(e.message.find("tokens but the context holds 32"), std::string::npos) << e.message;
  EXPECT_EQ(e.param, "messages");
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

TEST(OpenAiRequest, ResponseFormatsPenaltiesAndLogitBiasReachTheSampler) {
  const ModelInfo model = TestModel();
  const ParsedRequest object = ExpectParsed(ParseChatCompletionRequest(
      Chat(R"("response_format": {"type": "json_object"}, "max_tokens": 50)"), model));
  EXPECT_EQ(object.spec.sampling.constraint, "json_object");
  EXPECT_EQ(object.spec.sampling.answer_budget, 50);
  // The schema keeps the client's key order (the request's JSON type sorts keys).
  const ParsedRequest schema = ExpectParsed(ParseChatCompletionRequest(
      Chat(R"("response_format": {"type": "json_schema", "json_schema": {"name": "r", "strict": true,
              "schema": {"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"}},
                         "required": ["zeta", "alpha"], "additionalProperties": false}}})"),
      model));
  EXPECT_EQ(schema.spec.sampling.constraint,
            R"(json_schema {"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"}},)"
            R"("required":["zeta","alpha"],"additionalProperties":false})");
  const ParsedRequest biased = ExpectParsed(ParseChatCompletionRequest(
      Chat(R"("frequency_penalty": 0.5, "presence_penalty": -1, "logit_bias": {"10": -100, "9": 5.5})"), model));
  EXPECT_FLOAT_EQ(biased.spec.sampling.frequency_penalty, 0.5f);
  EXPECT_FLOAT_EQ(biased.spec.sampling.presence_penalty, -1.0f);
  const std::vector<std::pair<int32_t, float>> want = {{9, 5.5f}, {10, -100.0f}};  // by id, not as sent
  EXPECT_EQ(biased.spec.sampling.logit_bias, want);
  EXPECT_TRUE(biased.spec.sampling.constraint.empty());
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// A prompt that cannot fit whatever it encodes to is refused before it is
// tokenized (the pre-tokenizer's memory grows with the bytes).
TEST(OpenAiRequest, APromptTooLongInBytesIsRefusedBeforeTokenizing) {
  const ModelInfo model = TestModel();
  const size_t per_token = model.tokenizer->max_token_bytes() + 1;
  const std::string big(size_t(model.context_length) * per_token, 'a');
  for (const std::string& body :
       {R"({"prompt": ")" + big + R"("})", R"({"messages": [{"role": "user", "content": ")" + big + R"("}]})"}) {
    const bool chat = body.find("messages") != std::string::npos;
    const ApiError e = ExpectError(chat ? ParseChatCompletionRequest(body, model) : ParseCompletionRequest(body, model));
    EXPECT_EQ(e.code, "context_length_exceeded");
    EXPECT_NE(e.message.find("bytes"), std::string::npos) << e.message;
  }
  // Just under the bound, the prompt is tokenized and judged by its tokens.
  const std::string fits(size_t(model.context_length) * per_token - per_token, 'a');
  const ParseResult r = ParseCompletionRequest(R"({"prompt": ")" + fits + R"("})", model);
  if (const auto* e = std::get_if<ApiError>(&r)) {
    EXPECT_EQ(e->message.find("bytes"), std::string::npos) << e->message;
  }
}

}  // namespace
}  // namespace tandem
