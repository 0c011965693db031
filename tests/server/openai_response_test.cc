// Tool-call extraction, response bodies, SSE framing and errors, each parsed
// back with nlohmann to check fields and types.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <string>

#include "server/openai_api.h"

namespace tandem {
namespace {

using Json = nlohmann::json;

// ---------------------------------------------------------------- tool calls

TEST(ToolCalls, TextWithoutCallsIsUntouched) {
  const ParsedOutput out = ParseToolCalls("  Hello, world.\n", 7);
  EXPECT_EQ(out.content, "  Hello, world.\n");
  EXPECT_TRUE(out.tool_calls.empty());
}

TEST(ToolCalls, OneCallWithObjectArguments) {
  const ParsedOutput out = ParseToolCalls(
      "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
      "</tool_call>\n",
      7);
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].id, "call_7_0");
  EXPECT_EQ(out.tool_calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(out.tool_calls[0].arguments_json), Json({{"city", "Paris"}}));
  EXPECT_EQ(out.content, "");
}

TEST(ToolCalls, TwoCallsAndTextBetween) {
  const ParsedOutput out = ParseToolCalls(
      "Let me check. <tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call> and "
      "<tool_call>{\"name\": \"b\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>",
      9);
  ASSERT_EQ(out.tool_calls.size(), 2u);
  EXPECT_EQ(out.tool_calls[0].id, "call_9_0");
  EXPECT_EQ(out.tool_calls[1].id, "call_9_1");
  EXPECT_EQ(out.tool_calls[0].name, "a");
  EXPECT_EQ(out.tool_calls[0].arguments_json, "{}");
  // String arguments are already JSON text and pass through unchanged.
  EXPECT_EQ(out.tool_calls[1].arguments_json, "{\"x\": 1}");
  EXPECT_EQ(out.content, "Let me check.  and");
}

// Llama 3 templates ask for the whole answer to be the call, with
// "parameters" (or "arguments"), after an optional <|python_tag|>.
TEST(ToolCalls, Llama3JsonAnswers) {
  ParsedOutput out = ParseToolCalls(
      "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}\n", 4, ToolCallFormat::kJson);
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].id, "call_4_0");
  EXPECT_EQ(out.tool_calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(out.tool_calls[0].arguments_json), Json({{"city", "Oslo"}}));
  EXPECT_EQ(out.content, "");
  out = ParseToolCalls(R"([{"name": "a", "arguments": {}}, {"name": "b", "parameters": {"x": 1}}])", 4,
                       ToolCallFormat::kJson);
  ASSERT_EQ(out.tool_calls.size(), 2u);
  EXPECT_EQ(out.tool_calls[1].name, "b");
  EXPECT_EQ(out.tool_calls[1].id, "call_4_1");
  // Prose, a call inside prose, or an array with one bad entry: all content.
  for (const std::string& text : {std::string("It is sunny."), std::string("Sure: {\"name\": \"a\", \"parameters\": {}}"),
                                 std::string(R"([{"name": "a", "parameters": {}}, {"parameters": {}}])"),
                                 std::string("{\"name\": \"a\"}"), std::string(5000, '[')}) {
    out = ParseToolCalls(text, 4, ToolCallFormat::kJson);
    EXPECT_TRUE(out.tool_calls.empty()) << text.substr(0, 60);
    EXPECT_EQ(out.content, text);
  }
}

// Mistral's [TOOL_CALLS] array, with the nine-character ids its templates
// insist on when the calls come back in the next request.
TEST(ToolCalls, MistralToolCallsWithNineCharacterIds) {
  const ParsedOutput out = ParseToolCalls(
      "Checking. [TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}, "
      "{\"name\": \"search\", \"arguments\": {\"q\": \"x\"}}]",
      11, ToolCallFormat::kMistral);
  ASSERT_EQ(out.tool_calls.size(), 2u);
  EXPECT_EQ(out.content, "Checking.");
  EXPECT_EQ(out.tool_calls[1].name, "search");
  for (const ToolCall& c : out.tool_calls) {
    ASSERT_EQ(c.id.size(), 9u) << c.id;
    EXPECT_TRUE(std::all_of(c.id.begin(), c.id.end(), [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)); }))
        << c.id;
  }
  EXPECT_NE(out.tool_calls[0].id, out.tool_calls[1].id);
  EXPECT_EQ(ParseToolCalls("[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {}}]", 11,
                           ToolCallFormat::kMistral).tool_calls[0].id,
            out.tool_calls[0].id)
      << "ids are a pure function of the request and the index";
  for (const std::string& text : {std::string("No calls here."), std::string("[TOOL_CALLS] not json"),
                                 std::string("[TOOL_CALLS] [{\"name\": \"\", \"arguments\": {}}]")}) {
    const ParsedOutput o = ParseToolCalls(text, 11, ToolCallFormat::kMistral);
    EXPECT_TRUE(o.tool_calls.empty()) << text;
    EXPECT_EQ(o.content, text);
  }
}

TEST(ToolCalls, MalformedBlocksStayInContent) {
  const std::string bad_json = "<tool_call>{\"name\": \"a\", \"arguments\": {</tool_call>";
  const std::string no_name = "<tool_call>{\"arguments\": {}}</tool_call>";
  const std::string bad_args = "<tool_call>{\"name\": \"a\", \"arguments\": 5}</tool_call>";
  const std::string not_object = "<tool_call>[1, 2]</tool_call>";
  const std::string good = "<tool_call>{\"name\": \"ok\", \"arguments\": {}}</tool_call>";
  const ParsedOutput out =
      ParseToolCalls(bad_json + " " + no_name + bad_args + not_object + good, 1);
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].name, "ok");
  EXPECT_EQ(out.tool_calls[0].id, "call_1_0");
  EXPECT_EQ(out.content, bad_json + " " + no_name + bad_args + not_object);
}

TEST(ToolCalls, FinalBlockWithoutClosingTag) {
  ParsedOutput out = ParseToolCalls("<tool_call>{\"name\": \"f\", \"arguments\": {\"k\": [1]}}", 2);
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].arguments_json, "{\"k\":[1]}");
  // Cut off mid-JSON: nothing to call, so the text stays.
  out = ParseToolCalls("Sure <tool_call>{\"name\": \"f\", \"argu", 2);
  EXPECT_TRUE(out.tool_calls.empty());
  EXPECT_EQ(out.content, "Sure <tool_call>{\"name\": \"f\", \"argu");
}

// ---------------------------------------------------------------- responses

ResponseMeta Meta(bool include_usage = false) {
  ResponseMeta m;
  m.model = "tiny";
  m.request_id = 42;
  m.created = 1700000123;
  m.include_usage = include_usage;
  return m;
}

void ExpectUsage(const Json& usage, int64_t prompt, int64_t completion, int64_t cached) {
  EXPECT_EQ(usage.at("prompt_tokens").get<int64_t>(), prompt);
  EXPECT_EQ(usage.at("completion_tokens").get<int64_t>(), completion);
  EXPECT_EQ(usage.at("total_tokens").get<int64_t>(), prompt + completion);
  EXPECT_EQ(usage.at("prompt_tokens_details").at("cached_tokens").get<int64_t>(), cached);
}

TEST(OpenAiResponse, ChatCompletionShape) {
  const Json j = Json::parse(ChatCompletionJson(Meta(), ParsedOutput{"Hello \xE2\x82\xAC", {}},
                                                "length", Usage{10, 5, 4}));
  EXPECT_EQ(j.at("id"), "chatcmpl-42");
  EXPECT_EQ(j.at("object"), "chat.completion");
  EXPECT_TRUE(j.at("created").is_number_integer());
  EXPECT_EQ(j.at("created").get<int64_t>(), 1700000123);
  EXPECT_EQ(j.at("model"), "tiny");
  ASSERT_EQ(j.at("choices").size(), 1u);
  const Json& choice = j.at("choices")[0];
  EXPECT_EQ(choice.at("index"), 0);
  EXPECT_EQ(choice.at("finish_reason"), "length");
  EXPECT_TRUE(choice.at("logprobs").is_null());
  EXPECT_EQ(choice.at("message").at("role"), "assistant");
  EXPECT_EQ(choice.at("message").at("content"), "Hello \xE2\x82\xAC");
  EXPECT_FALSE(choice.at("message").contains("tool_calls"));
  ExpectUsage(j.at("usage"), 10, 5, 4);
}

TEST(OpenAiResponse, ChatCompletionWithToolCalls) {
  const ParsedOutput output = ParseToolCalls(
      "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>",
      42);
  const Json j = Json::parse(ChatCompletionJson(Meta(), output, "stop", Usage{3, 2, 0}));
  const Json& choice = j.at("choices")[0];
  EXPECT_EQ(choice.at("finish_reason"), "tool_calls");
  EXPECT_TRUE(choice.at("message").at("content").is_null());
  const Json& calls = choice.at("message").at("tool_calls");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].at("id"), "call_42_0");
  EXPECT_EQ(calls[0].at("type"), "function");
  EXPECT_EQ(calls[0].at("function").at("name"), "get_weather");
  ASSERT_TRUE(calls[0].at("function").at("arguments").is_string());
  EXPECT_EQ(Json::parse(calls[0].at("function").at("arguments").get<std::string>()),
            Json({{"city", "Paris"}}));
  // A call cut off by the token limit still reports "length".
  const Json cut = Json::parse(ChatCompletionJson(Meta(), output, "length", Usage{}));
  EXPECT_EQ(cut.at("choices")[0].at("finish_reason"), "length");
}

TEST(OpenAiResponse, CompletionShape) {
  const Json j = Json::parse(CompletionJson(Meta(), " upon a time", "stop", Usage{4, 3, 0}));
  EXPECT_EQ(j.at("id"), "cmpl-42");
  EXPECT_EQ(j.at("object"), "text_completion");
  EXPECT_EQ(j.at("model"), "tiny");
  const Json& choice = j.at("choices")[0];
  EXPECT_EQ(choice.at("text"), " upon a time");
  EXPECT_EQ(choice.at("index"), 0);
  EXPECT_EQ(choice.at("finish_reason"), "stop");
  EXPECT_TRUE(choice.at("logprobs").is_null());
  ExpectUsage(j.at("usage"), 4, 3, 0);
}

TEST(OpenAiResponse, InvalidUtf8InOutputIsReplacedNotThrown) {
  const Json j = Json::parse(CompletionJson(Meta(),
                                            "a\xFF"
                                            "b",
                                            "stop", Usage{}));
  EXPECT_EQ(j.at("choices")[0].at("text"),
            "a\xEF\xBF\xBD"
            "b");
}

// ---------------------------------------------------------------- SSE

// One frame: "data: " + a single line of JSON + a blank line.
Json ParseFrame(const std::string& frame) {
  EXPECT_EQ(frame.rfind("data: ", 0), 0u) << frame;
  EXPECT_GE(frame.size(), 8u);
  EXPECT_EQ(frame.substr(frame.size() - 2), "\n\n");
  const std::string payload = frame.substr(6, frame.size() - 8);
  EXPECT_EQ(payload.find('\n'), std::string::npos) << "SSE data must be one line";
  return Json::parse(payload);
}

TEST(OpenAiSse, ChatStream) {
  ChatDelta first;
  first.role = true;
  first.content = "";
  Json j = ParseFrame(ChatChunkSse(Meta(), first));
  EXPECT_EQ(j.at("id"), "chatcmpl-42");
  EXPECT_EQ(j.at("object"), "chat.completion.chunk");
  EXPECT_EQ(j.at("created").get<int64_t>(), 1700000123);
  EXPECT_EQ(j.at("choices")[0].at("delta"), Json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(j.at("choices")[0].at("finish_reason").is_null());
  EXPECT_FALSE(j.contains("usage"));

  ChatDelta text;
  text.content = "line one\nline \"two\"";
  j = ParseFrame(ChatChunkSse(Meta(), text));
  EXPECT_EQ(j.at("choices")[0].at("delta"), Json({{"content", "line one\nline \"two\""}}));

  ChatDelta calls;
  calls.tool_calls = {ToolCallDelta{0, "", "", "}"}, ToolCallDelta{1, "call_42_1", "g", "{\"a\":"}};
  j = ParseFrame(ChatChunkSse(Meta(), calls));
  const Json& delta_calls = j.at("choices")[0].at("delta").at("tool_calls");
  ASSERT_EQ(delta_calls.size(), 2u);
  // A call's first delta has its id, type and name; later ones only arguments.
  EXPECT_EQ(delta_calls[0], Json({{"index", 0}, {"function", {{"arguments", "}"}}}}));
  EXPECT_EQ(delta_calls[1].at("index"), 1);
  EXPECT_EQ(delta_calls[1].at("id"), "call_42_1");
  EXPECT_EQ(delta_calls[1].at("type"), "function");
  EXPECT_EQ(delta_calls[1].at("function"), Json({{"name", "g"}, {"arguments", "{\"a\":"}}));

  ChatDelta last;
  last.finish_reason = "stop";
  j = ParseFrame(ChatChunkSse(Meta(), last));
  EXPECT_TRUE(j.at("choices")[0].at("delta").is_object());
  EXPECT_TRUE(j.at("choices")[0].at("delta").empty());
  EXPECT_EQ(j.at("choices")[0].at("finish_reason"), "stop");
}

TEST(OpenAiSse, UsageChunksAndDone) {
  // With include_usage, every chunk carries "usage": null until the last.
  ChatDelta text;
  text.content = "x";
  Json j = ParseFrame(ChatChunkSse(Meta(/*include_usage=*/true), text));
  ASSERT_TRUE(j.contains("usage"));
  EXPECT_TRUE(j.at("usage").is_null());
  j = ParseFrame(UsageChunkSse(Meta(true), /*chat=*/true, Usage{7, 3, 2}));
  EXPECT_EQ(j.at("object"), "chat.completion.chunk");
  EXPECT_TRUE(j.at("choices").is_array());
  EXPECT_TRUE(j.at("choices").empty());
  ExpectUsage(j.at("usage"), 7, 3, 2);
  j = ParseFrame(UsageChunkSse(Meta(true), /*chat=*/false, Usage{7, 3, 0}));
  EXPECT_EQ(j.at("object"), "text_completion");
  EXPECT_EQ(j.at("id"), "cmpl-42");
  EXPECT_EQ(DoneSse(), "data: [DONE]\n\n");
}

TEST(OpenAiSse, CompletionStream) {
  Json j = ParseFrame(CompletionChunkSse(Meta(), " upon", ""));
  EXPECT_EQ(j.at("id"), "cmpl-42");
  EXPECT_EQ(j.at("object"), "text_completion");
  EXPECT_EQ(j.at("choices")[0].at("text"), " upon");
  EXPECT_TRUE(j.at("choices")[0].at("finish_reason").is_null());
  j = ParseFrame(CompletionChunkSse(Meta(), "", "length"));
  EXPECT_EQ(j.at("choices")[0].at("finish_reason"), "length");
}

// ---------------------------------------------------------------- errors, models

TEST(OpenAiErrors, ErrorJsonShape) {
  ApiError e;
  e.message = "'n' must be 1";
  e.param = "n";
  Json j = Json::parse(ErrorJson(e));
  EXPECT_EQ(j.at("error").at("message"), "'n' must be 1");
  EXPECT_EQ(j.at("error").at("type"), "invalid_request_error");
  EXPECT_EQ(j.at("error").at("param"), "n");
  EXPECT_TRUE(j.at("error").at("code").is_null());
  e.param.clear();
  e.code = "context_length_exceeded";
  j = Json::parse(ErrorJson(e));
  EXPECT_TRUE(j.at("error").at("param").is_null());
  EXPECT_EQ(j.at("error").at("code"), "context_length_exceeded");
}

TEST(OpenAiErrors, FromStatus) {
  struct Case {
    Status status;
    int http;
    std::string type;
  };
  const Case cases[] = {
      {InvalidArgument("bad"), 400, "invalid_request_error"},
      {OutOfRange("far"), 400, "invalid_request_error"},
      {NotFound("gone"), 404, "invalid_request_error"},
      {ResourceExhausted("full"), 429, "rate_limit_error"},
      {Unavailable("draining"), 503, "server_error"},
      {Status(StatusCode::kDeadlineExceeded, "slow"), 504, "server_error"},
      {Internal("oops"), 500, "server_error"},
      {DataLoss("corrupt"), 500, "server_error"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.status.ToString());
    const ApiError e = ApiErrorFromStatus(c.status);
    EXPECT_EQ(e.http_status, c.http);
    EXPECT_EQ(e.type, c.type);
    EXPECT_EQ(e.message, c.status.message());
  }
  EXPECT_EQ(ApiErrorFromStatus(ResourceExhausted("x")).code, "rate_limit_exceeded");
}

TEST(OpenAiModels, ListShape) {
  ModelInfo m;
  m.id = "tiny";
  m.context_length = 2048;
  m.created = 1700000000;
  const Json j = Json::parse(ModelsJson(m));
  EXPECT_EQ(j.at("object"), "list");
  ASSERT_EQ(j.at("data").size(), 1u);
  const Json& model = j.at("data")[0];
  EXPECT_EQ(model.at("id"), "tiny");
  EXPECT_EQ(model.at("object"), "model");
  EXPECT_EQ(model.at("created").get<int64_t>(), 1700000000);
  EXPECT_EQ(model.at("owned_by"), "tandem");
  EXPECT_EQ(model.at("context_length").get<int64_t>(), 2048);
  EXPECT_EQ(Json::parse(ModelJson(m)), model);
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// Every split of an answer into streamed pieces gives the same content and
// calls, and a well-formed block's arguments go out as they are written.
TEST(ToolCallStreamer, CallsStreamArgumentByArgumentAndEverySplitAgrees) {
  const std::string answer =
      "Let me check.\n<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa}ris\", \"days\": [1, 2]}}"
      "</tool_call>\n<tool_call>{\"arguments\": {}, \"name\": \"late_name\"}</tool_call> <tool_c";
  struct Call {
    std::string id, name, arguments;
  };
  auto run = [&](size_t piece, int* argument_deltas) {
    ToolCallStreamer s(7, ToolCallFormat::kTagged);
    std::string content;
    std::vector<Call> calls;
    auto take = [&](ToolCallStreamer::Out out) {
      content += out.content;
      for (const ToolCallDelta& d : out.calls) {
        if (d.index == int(calls.size())) calls.push_back({d.id, d.name, ""});
        ASSERT_EQ(d.index, int(calls.size()) - 1);
        calls.back().arguments += d.arguments;
        if (!d.arguments.empty()) ++*argument_deltas;
      }
    };
    for (size_t i = 0; i < answer.size(); i += piece) take(s.Push(answer.substr(i, piece)));
    take(s.Finish());
    EXPECT_EQ(s.calls(), 2);
    return std::make_pair(content, calls);
  };
  int whole_deltas = 0;
  const auto [content, calls] = run(answer.size(), &whole_deltas);
  EXPECT_EQ(content, "Let me check.\n\n <tool_c");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].id, "call_7_0");
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(calls[0].arguments, "{\"city\": \"Pa}ris\", \"days\": [1, 2]}");  // as written
  EXPECT_EQ(calls[1].id, "call_7_1");  // parsed whole: "arguments" came first
  EXPECT_EQ(calls[1].name, "late_name");
  EXPECT_EQ(calls[1].arguments, "{}");
  for (size_t piece : {1, 2, 3, 5, 8, 13}) {
    int deltas = 0;
    const auto [c, k] = run(piece, &deltas);
    EXPECT_EQ(c, content) << piece;
    ASSERT_EQ(k.size(), calls.size()) << piece;
    for (size_t i = 0; i < k.size(); ++i) {
      EXPECT_EQ(k[i].id, calls[i].id);
      EXPECT_EQ(k[i].name, calls[i].name);
      EXPECT_EQ(k[i].arguments, calls[i].arguments) << piece;
    }
    if (piece == 1) {
      EXPECT_GT(deltas, 30) << "one character at a time, the arguments streamed";
    }
  }
  // Keys after the arguments are ignored, streamed or not.
  const std::string extra = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"id\": \"x\"}</tool_call>";
  ToolCallStreamer x(7, ToolCallFormat::kTagged);
  ToolCallStreamer::Out got = x.Push(extra);
  const ToolCallStreamer::Out tail = x.Finish();
  EXPECT_EQ(got.content + tail.content, ParseToolCalls(extra, 7).content);
  ASSERT_EQ(got.calls.size(), 1u);
  EXPECT_EQ(got.calls[0].arguments, "{\"a\": 1}");
  // parallel_tool_calls false: the first call only.
  ToolCallStreamer one(7, ToolCallFormat::kTagged, 1);
  ToolCallStreamer::Out first = one.Push(answer);
  ToolCallStreamer::Out rest = one.Finish();
  first.calls.insert(first.calls.end(), rest.calls.begin(), rest.calls.end());
  ASSERT_FALSE(first.calls.empty());
  EXPECT_TRUE(std::all_of(first.calls.begin(), first.calls.end(), [](const ToolCallDelta& d) { return d.index == 0; }));
  // Llama 3 JSON and Mistral answers are parsed whole, at the end.
  ToolCallStreamer mistral(7, ToolCallFormat::kMistral);
  EXPECT_TRUE(mistral.Push("[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"x\": 1}}]").calls.empty());
  const ToolCallStreamer::Out end = mistral.Finish();
  ASSERT_EQ(end.calls.size(), 1u);
  EXPECT_EQ(end.calls[0].name, "f");
  EXPECT_EQ(end.calls[0].id.size(), 9u);
  EXPECT_EQ(end.calls[0].arguments, "{\"x\":1}");
}

}  // namespace
}  // namespace tandem
