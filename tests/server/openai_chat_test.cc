// Chat requests: messages, content parts, roles, BOS handling, and tools
// rendered into the prompt.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
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

std::string PromptText(const ParsedRequest& r) { return TestTokenizer().Decode(r.spec.prompt); }

ApiError ChatError(const std::string& body) {
  return ExpectError(ParseChatCompletionRequest(body, TestModel()));
}

void ExpectMessagesError(const std::string& messages, const std::string& message_part) {
  SCOPED_TRACE(messages);
  const ApiError e = ChatError(R"({"messages": )" + messages + "}");
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param.rfind("messages", 0), 0u) << e.param;  // the path of the bad field
  EXPECT_NE(e.message.find(message_part), std::string::npos) << e.message;
}

TEST(OpenAiChat, RejectsBadMessages) {
  EXPECT_NE(ChatError(R"({"model": "tiny"})").message.find("'messages' is required"),
            std::string::npos);
  ExpectMessagesError(R"("hello")", "'messages' must be an array");
  ExpectMessagesError("[]", "'messages' must not be empty");
  ExpectMessagesError(R"(["hi"])", "'messages[0]' must be an object");
  ExpectMessagesError(R"([{"content": "hi"}])", "'messages[0]' must have a 'role'");
  ExpectMessagesError(R"([{"role": "user"}])", "'messages[0]' must have 'content'");
  ExpectMessagesError(R"([{"role": "user", "content": null}])", "must have 'content'");
  ExpectMessagesError(R"([{"role": "user", "content": "a"}, {"role": "wizard", "content": "b"}])",
                      "'messages[1]' has role 'wizard'");
  ExpectMessagesError(R"([{"role": "user", "content": 42}])",
                      "'messages[0].content' must be a string or an array of text parts");
  ExpectMessagesError(
      R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])",
      "'messages[0].content[0]' has type 'image_url'; only \"text\" parts are supported");
  ExpectMessagesError(R"([{"role": "user", "content": [{"type": "text"}]}])",
                      "'messages[0].content[0].text' is required");
  ExpectMessagesError(R"([{"role": "user", "content": [{"type": "text", "text": 3}]}])",
                      "'messages[0].content[0].text' must be a string");
  ExpectMessagesError(R"([{"role": "user", "content": ["plain"]}])",
                      "'messages[0].content[0]' must be an object");
  const ApiError role = ChatError(R"({"messages": [{"role": 1, "content": "x"}]})");
  EXPECT_EQ(role.message, "'messages[0].role' must be a string");
  EXPECT_EQ(role.param, "messages[0].role");
  EXPECT_EQ(ChatError(R"({"messages": [{"role": "user", "content": [{"type": "audio"}]}]})").param,
            "messages[0].content[0]");
}

TEST(OpenAiChat, RendersStringAndPartContent) {
  const ParsedRequest plain = ExpectParsed(ParseChatCompletionRequest(
      R"({"messages": [{"role": "system", "content": "Be brief."},
                       {"role": "user", "content": "Once upon a time"}]})",
      TestModel()));
  EXPECT_EQ(PromptText(plain),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nOnce upon a "
            "time<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_FALSE(plain.tools_enabled);
  const ParsedRequest parts = ExpectParsed(ParseChatCompletionRequest(
      R"({"messages": [{"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
                       {"role": "user", "content": [{"type": "text", "text": "Once upon"},
                                                    {"type": "text", "text": "a time"}]}]})",
      TestModel()));
  EXPECT_NE(PromptText(parts).find("<|im_start|>system\nBe brief.<|im_end|>"), std::string::npos);
  EXPECT_NE(PromptText(parts).find("user\nOnce upon\na time<|im_end|>"), std::string::npos);
}

int CountBos(const std::vector<int32_t>& ids) {
  return int(std::count(ids.begin(), ids.end(), TestTokenizer().bos_id()));
}

TEST(OpenAiChat, BosOnceWhetherOrNotTheTemplateWritesIt) {
  const std::string body =
      R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]})";
  for (ChatTemplateKind kind : {ChatTemplateKind::kChatml, ChatTemplateKind::kPlain,
                                ChatTemplateKind::kLlama3, ChatTemplateKind::kLlama2}) {
    SCOPED_TRACE(ChatTemplateName(kind));
    const ParsedRequest r = ExpectParsed(ParseChatCompletionRequest(body, TestModel(kind)));
    ASSERT_FALSE(r.spec.prompt.empty());
    EXPECT_EQ(r.spec.prompt.front(), 1);
    EXPECT_EQ(CountBos(r.spec.prompt), 1);
  }
  // Llama-2 opens every user turn with BOS, written by the template as "<s>"
  // and parsed back into the control token.
  const ParsedRequest two_turns = ExpectParsed(ParseChatCompletionRequest(
      R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                       {"role": "user", "content": "c"}]})",
      TestModel(ChatTemplateKind::kLlama2)));
  EXPECT_EQ(CountBos(two_turns.spec.prompt), 2);
}

const char* kWeatherTools = R"("tools": [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}])";

std::string ToolRequest(const std::string& extra) {
  return R"({"messages": [{"role": "user", "content": "Weather in Paris?"}], )" +
         std::string(kWeatherTools) + (extra.empty() ? "" : ", " + extra) + "}";
}

TEST(OpenAiChat, RendersToolsAsSystemMessage) {
  const ParsedRequest r = ExpectParsed(ParseChatCompletionRequest(ToolRequest(""), TestModel()));
  EXPECT_TRUE(r.tools_enabled);
  const std::string text = PromptText(r);
  EXPECT_EQ(text.find("<|im_start|>system\n# Tools"), 0u) << text;
  EXPECT_NE(text.find("\"name\": \"get_weather\""), std::string::npos) << text;
  EXPECT_NE(text.find("Current weather for a city"), std::string::npos);
  EXPECT_NE(text.find(R"("required":["city"])"), std::string::npos) << text;
  EXPECT_NE(text.find("<tool_call>{\"name\": "), std::string::npos);
  EXPECT_NE(text.find("</tool_call>"), std::string::npos);
  EXPECT_LT(text.find("# Tools"), text.find("Weather in Paris?"));
}

TEST(OpenAiChat, ToolsJoinAnExistingSystemMessage) {
  const ParsedRequest r = ExpectParsed(ParseChatCompletionRequest(
      R"({"messages": [{"role": "system", "content": "Be brief."},
                       {"role": "user", "content": "hi"}], )" +
          std::string(kWeatherTools) + "}",
      TestModel()));
  const std::string text = PromptText(r);
  EXPECT_NE(text.find("system\nBe brief.\n\n# Tools"), std::string::npos) << text;
  EXPECT_EQ(text.find("<|im_start|>system", 1), std::string::npos) << "one system turn only";
}

TEST(OpenAiChat, ToolChoice) {
  const ModelInfo m = TestModel();
  ParsedRequest r =
      ExpectParsed(ParseChatCompletionRequest(ToolRequest(R"("tool_choice": "none")"), m));
  EXPECT_FALSE(r.tools_enabled);
  EXPECT_EQ(PromptText(r).find("get_weather"), std::string::npos);
  r = ExpectParsed(ParseChatCompletionRequest(ToolRequest(R"("tool_choice": "required")"), m));
  EXPECT_TRUE(r.tools_enabled);
  EXPECT_NE(PromptText(r).find("You must call at least one function."), std::string::npos);
  r = ExpectParsed(ParseChatCompletionRequest(
      ToolRequest(R"("tool_choice": {"type": "function", "function": {"name": "get_weather"}})"),
      m));
  EXPECT_NE(PromptText(r).find("You must call the function 'get_weather'."), std::string::npos);
  // A forced choice is a grammar: one call of that tool, in the answer's format.
  EXPECT_NE(r.spec.sampling.constraint.find(R"("call_prefix":"<tool_call>")"), std::string::npos) << r.spec.sampling.constraint;
  EXPECT_NE(r.spec.sampling.constraint.find(R"({"name":"get_weather","parameters":{"type":"object")"), std::string::npos)
      << r.spec.sampling.constraint;
  EXPECT_NE(r.spec.sampling.constraint.find(R"("max_calls":1)"), std::string::npos) << "a named function: one call";
  EXPECT_TRUE(r.parallel_tool_calls);
  r = ExpectParsed(ParseChatCompletionRequest(ToolRequest(R"("parallel_tool_calls": false)"), m));
  EXPECT_FALSE(r.parallel_tool_calls);
  EXPECT_TRUE(r.spec.sampling.constraint.empty()) << "auto: no grammar";
  EXPECT_NE(PromptText(r).find("Call at most one function."), std::string::npos) << PromptText(r);
  // "auto" and "none" without tools are harmless.
  r = ExpectParsed(ParseChatCompletionRequest(
      R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "auto", "tools": []})",
      m));
  EXPECT_FALSE(r.tools_enabled);
}

TEST(OpenAiChat, RejectsBadToolsAndToolChoice) {
  const std::string user = R"({"messages": [{"role": "user", "content": "x"}], )";
  struct Case {
    std::string body, message_part, param;
  };
  const std::vector<Case> cases = {
      {user + R"("tools": {}})", "'tools' must be an array", "tools"},
      {user + R"("tools": [{"type": "retrieval"}]})", "'tools[0]' must be an object with",
       "tools[0]"},
      {user + R"("tools": [{"type": "function"}]})", "'tools[0].function' must be an object",
       "tools[0]"},
      {user + R"("tools": [{"type": "function", "function": {"name": ""}}]})",
       "'tools[0].function.name' must be a non-empty string", "tools[0]"},
      {user + R"("tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]})",
       "'tools[0].function.parameters' must be a JSON Schema object", "tools[0]"},
      {user + R"("tool_choice": "required"})", "'tool_choice' requires 'tools'", "tool_choice"},
      {ToolRequest(R"("tool_choice": "sometimes")"), "'tool_choice' must be", "tool_choice"},
      {ToolRequest(R"("tool_choice": {"type": "function", "function": {"name": "nope"}})"),
       "names function 'nope', which is not in 'tools'", "tool_choice"},
      {ToolRequest(R"("tool_choice": {"type": "function"})"), "'tool_choice' object must be",
       "tool_choice"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    const ApiError e = ChatError(c.body);
    EXPECT_EQ(e.http_status, 400);
    EXPECT_NE(e.message.find(c.message_part), std::string::npos) << e.message;
    EXPECT_EQ(e.param, c.param);
  }
}

TEST(OpenAiChat, RendersEarlierToolCallsAndResults) {
  const ParsedRequest r = ExpectParsed(ParseChatCompletionRequest(
      R"({"messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",
              "type": "function",
              "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"}], )" +
          std::string(kWeatherTools) + "}",
      TestModel(ChatTemplateKind::kChatml, 4096)));
  const std::string text = PromptText(r);
  EXPECT_NE(text.find("<|im_start|>assistant\n<tool_call>{\"name\": \"get_weather\", "
                      "\"arguments\": {\"city\":\"Paris\"}}</tool_call><|im_end|>"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("<|im_start|>tool\n<tool_response>\n18C, sunny\n</tool_response><|im_end|>"),
            std::string::npos)
      << text;
}

TEST(OpenAiChat, RejectsMalformedEarlierToolCalls) {
  const std::string prefix = R"({"messages": [{"role": "user", "content": "x"},
                                  {"role": "assistant", "tool_calls": )";
  struct Case {
    std::string calls, message_part;
  };
  for (const Case& c : std::vector<Case>{
           {R"({})", "'messages[1].tool_calls' must be an array"},
           {R"([{"function": {"arguments": "{}"}}])",
            "'messages[1].tool_calls[0].function.name' must be a string"},
           {R"([{"function": {"name": "f", "arguments": {"a": 1}}}])",
            "'messages[1].tool_calls[0].function.arguments' must be a JSON string"},
           {R"([{"function": {"name": "f", "arguments": "{not json"}}])",
            "'messages[1].tool_calls[0].function.arguments' is not valid JSON"},
       }) {
    SCOPED_TRACE(c.calls);
    const ApiError e = ChatError(prefix + c.calls + "}]}");
    EXPECT_NE(e.message.find(c.message_part), std::string::npos) << e.message;
  }
}

// A template that lays out tools itself in the <tool_call> convention (the
// corpus's Qwen 2.5 shape) gets the request's tools and the conversation's
// calls and results structured, exactly as Hugging Face would pass them; no
// tandem tool text is added.
TEST(OpenAiChat, ATemplateThatLaysOutToolsGetsThemAndTheCallsStructured) {
  std::ifstream in(std::string(TANDEM_SOURCE_DIR) + "/tests/model/chat_templates/qwen25_tools.jinja");
  std::stringstream source;
  source << in.rdbuf();
  const ChatFormat format = ChatFormat::FromModel(source.str());
  ASSERT_TRUE(format.is_jinja()) << format.Describe();
  ASSERT_TRUE(format.native_tool_calls());
  ModelInfo m = TestModel(ChatTemplateKind::kChatml, 4096);
  m.chat_format = &format;
  const std::string messages = R"("messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}])";
  const ParsedRequest r =
      ExpectParsed(ParseChatCompletionRequest("{" + messages + ", " + kWeatherTools + "}", m));
  EXPECT_TRUE(r.tools_enabled);
  auto tmpl = jinja::Template::Parse(source.str());
  ASSERT_TRUE(tmpl.ok());
  // The tools' parameters keep the order the client sent them in (type first), as Hugging Face passes them.
  const jinja::Json context = jinja::Json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
      {"role": "tool", "content": "sunny", "tool_call_id": "call_1"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
    "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true})");
  auto want = tmpl->Render(context);
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  EXPECT_EQ(PromptText(r), *want);
  EXPECT_NE(want->find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}"),
            std::string::npos)
      << *want;
  EXPECT_EQ(want->find("# Tools"), std::string::npos);
  // A forced choice is said in the system turn; templates do not say it.
  const ParsedRequest forced = ExpectParsed(ParseChatCompletionRequest(
      "{" + messages + ", " + kWeatherTools + R"(, "tool_choice": "required", "max_tokens": 200})", m));
  EXPECT_NE(PromptText(forced).find("Be brief.\n\nYou must call at least one function."), std::string::npos)
      << PromptText(forced);
  // Without tools enabled the template gets none.
  const ParsedRequest none = ExpectParsed(ParseChatCompletionRequest(
      "{" + messages + ", " + kWeatherTools + R"(, "tool_choice": "none"})", m));
  EXPECT_EQ(PromptText(none).find("## Functions"), std::string::npos);
}

// A template that does not use tandem's tool convention still renders the
// conversation; tool calls and results reach it flattened into the
// <tool_call> / <tool_response> text tandem asks for.
TEST(OpenAiChat, OtherTemplatesGetToolCallsAsText) {
  // (trim_blocks: the newline after a block tag is dropped.)
  const ChatFormat format = ChatFormat::FromModel(
      "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% if m.tool_calls is defined %}CALLS{% endif %}\n"
      "{% endfor %}{% if tools is defined %}TOOLS{% endif %}");
  ASSERT_TRUE(format.is_jinja());
  ASSERT_FALSE(format.native_tool_calls());
  ModelInfo m = TestModel();
  m.chat_format = &format;
  const ParsedRequest r = ExpectParsed(ParseChatCompletionRequest(R"({"messages": [
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
      {"role": "tool", "content": "rain"}], )" + std::string(kWeatherTools) + "}", m));
  const std::string text = PromptText(r);
  EXPECT_EQ(text.find("[system]# Tools"), 0u) << text;
  EXPECT_NE(text.find("[assistant]<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\"}}</tool_call>[tool]"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("[tool]<tool_response>\nrain\n</tool_response>"), std::string::npos) << text;
  EXPECT_EQ(text.find("CALLS"), std::string::npos);
  EXPECT_EQ(text.find("TOOLS"), std::string::npos);
}

std::string CorpusTemplate(const std::string& name) {
  std::ifstream in(std::string(TANDEM_SOURCE_DIR) + "/tests/model/chat_templates/" + name);
  std::stringstream source;
  source << in.rdbuf();
  return source.str();
}

// Each tool template of the corpus is recognised by its markers and parsed in
// its own format; a Mistral conversation carries tandem's own call ids back
// through the template's nine-character check.
TEST(OpenAiChat, ToolTemplatesAreRecognisedAndTheirCallsComeBackThroughThem) {
  EXPECT_EQ(ChatFormat::FromModel(CorpusTemplate("qwen25_tools.jinja")).tool_call_format(), ToolCallFormat::kTagged);
  EXPECT_EQ(ChatFormat::FromModel(CorpusTemplate("llama3_tools.jinja")).tool_call_format(), ToolCallFormat::kJson);
  EXPECT_FALSE(ChatFormat::FromModel(CorpusTemplate("plain_features.jinja")).native_tool_calls());
  const ChatFormat mistral = ChatFormat::FromModel(CorpusTemplate("mistral_tools.jinja"));
  ASSERT_EQ(mistral.tool_call_format(), ToolCallFormat::kMistral) << mistral.Describe();
  ModelInfo m = TestModel();
  m.chat_format = &mistral;
  const ParsedRequest first = ExpectParsed(ParseChatCompletionRequest(ToolRequest(""), m));
  EXPECT_EQ(first.tool_format, ToolCallFormat::kMistral);
  EXPECT_NE(PromptText(first).find("[AVAILABLE_TOOLS]"), std::string::npos) << PromptText(first);
  const ParsedOutput answer = ParseToolCalls(
      "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]", 42, first.tool_format);
  ASSERT_EQ(answer.tool_calls.size(), 1u);
  auto next = [&](const std::string& id) {
    return R"({"messages": [{"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": ")" + id + R"(", "type": "function",
          "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": ")" + id + R"(", "content": "sunny"}], )" + std::string(kWeatherTools) + "}";
  };
  const ParsedRequest second = ExpectParsed(ParseChatCompletionRequest(next(answer.tool_calls[0].id), m));
  const std::string text = PromptText(second);
  EXPECT_NE(text.find("[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"" +
                      answer.tool_calls[0].id + "\"}]"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("[TOOL_RESULTS] {\"content\": sunny, \"call_id\": \"" + answer.tool_calls[0].id), std::string::npos)
      << text;
  // The template's own check speaks for it.
  const ApiError e = ExpectError(ParseChatCompletionRequest(next("call_1"), m));
  EXPECT_EQ(e.http_status, 400);
  EXPECT_NE(e.message.find("tool call ids are 9 characters"), std::string::npos) << e.message;
}

}  // namespace
}  // namespace tandem
