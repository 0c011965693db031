#include "model/chat_template.h"

#include <gtest/gtest.h>

#include "model/presets.h"

#include <vector>

namespace tandem {
namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "You are helpful."},
    {"user", "Hi"},
    {"assistant", "Hello!"},
    {"user", "Tell me a story."},
};

std::string Render(ChatTemplateKind kind, const std::vector<ChatMessage>& messages,
                   bool add_generation_prompt, std::string_view bos) {
  auto out = RenderChat(kind, messages, add_generation_prompt, bos);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return out.ok() ? *out : "";
}

TEST(ChatTemplate, Llama2) {
  EXPECT_EQ(Render(ChatTemplateKind::kLlama2, kConversation, true, "<s>"),
            "<s>[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nHi [/INST] Hello! </s>"
            "<s>[INST] Tell me a story. [/INST]");
  // Contents are trimmed, as the official template does with .strip().
  EXPECT_EQ(Render(ChatTemplateKind::kLlama2, {{"user", "  Hi\n"}}, true, "<s>"),
            "<s>[INST] Hi [/INST]");
}

TEST(ChatTemplate, Chatml) {
  const std::string expected =
      "<|im_start|>system\nYou are helpful.<|im_end|>\n"
      "<|im_start|>user\nHi<|im_end|>\n"
      "<|im_start|>assistant\nHello!<|im_end|>\n"
      "<|im_start|>user\nTell me a story.<|im_end|>\n";
  EXPECT_EQ(Render(ChatTemplateKind::kChatml, kConversation, true, "<s>"),
            expected + "<|im_start|>assistant\n");
  EXPECT_EQ(Render(ChatTemplateKind::kChatml, kConversation, false, "<s>"), expected);
  EXPECT_EQ(Render(ChatTemplateKind::kChatml, {{"tool", "42"}}, false, ""),
            "<|im_start|>tool\n42<|im_end|>\n");
}

TEST(ChatTemplate, Llama3) {
  const std::string expected =
      "<|begin_of_text|>"
      "<|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nTell me a story.<|eot_id|>";
  EXPECT_EQ(Render(ChatTemplateKind::kLlama3, kConversation, true, "<|begin_of_text|>"),
            expected + "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(Render(ChatTemplateKind::kLlama3, kConversation, false, "<|begin_of_text|>"), expected);
  EXPECT_EQ(Render(ChatTemplateKind::kLlama3, {{"tool", " 42 "}}, false, "B"),
            "B<|start_header_id|>ipython<|end_header_id|>\n\n42<|eot_id|>");
}

TEST(ChatTemplate, Plain) {
  EXPECT_EQ(Render(ChatTemplateKind::kPlain, kConversation, true, "<s>"),
            "System: You are helpful.\nUser: Hi\nAssistant: Hello!\nUser: Tell me a story.\n"
            "Assistant: ");
  EXPECT_EQ(Render(ChatTemplateKind::kPlain, {{"tool", "42"}}, false, "<s>"), "Tool: 42\n");
  EXPECT_EQ(Render(ChatTemplateKind::kPlain, {}, true, "<s>"), "Assistant: ");
}

TEST(ChatTemplate, UnknownRoleIsRejected) {
  for (ChatTemplateKind kind : {ChatTemplateKind::kLlama2, ChatTemplateKind::kChatml,
                                ChatTemplateKind::kLlama3, ChatTemplateKind::kPlain}) {
    const std::vector<ChatMessage> messages = {{"user", "Hi"}, {"narrator", "x"}};
    auto out = RenderChat(kind, messages, true, "<s>");
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(out.status().message().find("narrator"), std::string::npos);
  }
}

TEST(ChatTemplate, DetectsFamilyFromJinja) {
  EXPECT_EQ(DetectChatTemplate("{% for message in messages %}{{'<|im_start|>' + message['role']"
                               " + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"),
            ChatTemplateKind::kChatml);
  EXPECT_EQ(DetectChatTemplate("{% set content = '<|start_header_id|>' + message['role'] + "
                               "'<|end_header_id|>\\n\\n' + message['content'] | trim %}"),
            ChatTemplateKind::kLlama3);
  EXPECT_EQ(DetectChatTemplate("{{ bos_token + '[INST] ' + message['content'] | trim + "
                               "' [/INST]' }}"),
            ChatTemplateKind::kLlama2);
  EXPECT_EQ(DetectChatTemplate(""), ChatTemplateKind::kPlain);
  EXPECT_EQ(DetectChatTemplate("{{ messages[0]['content'] }}"), ChatTemplateKind::kPlain);
}

TEST(ChatTemplate, NamesRoundTrip) {
  for (ChatTemplateKind kind : {ChatTemplateKind::kLlama2, ChatTemplateKind::kChatml,
                                ChatTemplateKind::kLlama3, ChatTemplateKind::kPlain}) {
    EXPECT_EQ(ParseChatTemplateName(ChatTemplateName(kind)), kind);
  }
  EXPECT_STREQ(ChatTemplateName(ChatTemplateKind::kLlama3), "llama3");
  EXPECT_EQ(ParseChatTemplateName("vicuna"), std::nullopt);
}

// Generated models carry a Jinja template that renders exactly as the
// built-in Llama-2 shape: the server runs the model's own template, and the
// prompts of every earlier run stay what they were. (One token differs: a
// conversation that opens with an assistant turn now gets the tokenizer's
// BOS, as any template whose text does not start with BOS does.)
TEST(ChatFormat, PresetTemplateRendersAsTheBuiltinLlama2Shape) {
  const ChatFormat format = ChatFormat::FromModel(kPresetChatTemplate);
  ASSERT_TRUE(format.is_jinja()) << format.Describe();
  EXPECT_FALSE(format.native_tool_calls());
  const std::vector<std::vector<ChatMessage>> conversations = {
      kConversation,
      {{"user", "  Hi\n"}},
      {{"system", " one "}, {"system", ""}, {"system", "two"}, {"user", "u"}, {"assistant", " a "},
       {"tool", "{\"r\": 1}"}, {"assistant", "done"}},
      {{"system", "only a system turn"}},
      {{"system", ""}, {"user", "empty system"}},
      {{"user", "first"}, {"system", "late system"}, {"user", "second"}, {"system", "trailing"}},
      {{"assistant", "an answer first"}, {"user", "tabs\tand ünïcödé"}},
  };
  for (const auto& c : conversations) {
    auto got = format.Render(c, nullptr, true, "<s>", "</s>");
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, Render(ChatTemplateKind::kLlama2, c, true, "<s>"));
  }
  const std::vector<ChatMessage> unknown_role = {{"wizard", "x"}};
  EXPECT_FALSE(format.Render(unknown_role, nullptr, true, "<s>", "</s>").ok());
}

TEST(ChatFormat, ATemplateOutsideTheSubsetFallsBackToItsFamilyAndSaysWhy) {
  const std::string source = "{% macro turn(m) %}<|im_start|>{{ m.role }}{% endmacro %}";
  const ChatFormat format = ChatFormat::FromModel(source);
  EXPECT_FALSE(format.is_jinja());
  EXPECT_EQ(format.builtin_kind(), ChatTemplateKind::kChatml);
  EXPECT_NE(format.fallback_reason().find("'{% macro %}' is not supported"), std::string::npos)
      << format.fallback_reason();
  EXPECT_NE(format.Describe().find("built-in chatml"), std::string::npos) << format.Describe();
  auto rendered = format.Render(kConversation, nullptr, true, "<s>", "</s>");
  ASSERT_TRUE(rendered.ok());
  EXPECT_EQ(*rendered, Render(ChatTemplateKind::kChatml, kConversation, true, "<s>"));
  // A template the user gives must be one the subset runs.
  auto forced = ChatFormat::FromOverride(source);
  ASSERT_FALSE(forced.ok());
  EXPECT_NE(forced.status().message().find("macro"), std::string::npos) << forced.status().message();
  EXPECT_NE(ChatFormat::FromModel("").fallback_reason().find("no chat template"), std::string::npos);
}

// Issue 41: a render past its bounds (a messages array of many turns) was a
// 500, which the router moved to every backend. It is the request's doing:
// OutOfRange (400), never moved. A template past its bounds on a plain
// conversation is the template's fault: refused at load.
TEST(ChatFormat, ARenderPastItsBoundsIsTheRequestsError) {
  auto format = ChatFormat::FromOverride(
      "{% for i in range((messages | length) * 1000) %}{{ i }}{% endfor %}");
  ASSERT_TRUE(format.ok()) << format.status().ToString();
  const std::vector<ChatMessage> many(2000, ChatMessage{"user", ""});
  auto rendered = format->Render(many, nullptr, true, "<s>", "</s>");
  ASSERT_FALSE(rendered.ok());
  EXPECT_EQ(rendered.status().code(), StatusCode::kOutOfRange) << rendered.status().ToString();
  EXPECT_NE(rendered.status().message().find("too large for the chat template"), std::string::npos)
      << rendered.status().message();
  EXPECT_FALSE(ChatFormat::FromOverride("{% for i in range(3000000) %}{{ i }}{% endfor %}").ok());
  EXPECT_FALSE(ChatFormat::FromModel("{% for i in range(3000000) %}{{ i }}{% endfor %}").is_jinja());
}

TEST(ChatFormat, BosIsAddedOnlyWhereTheTemplateDidNotWriteIt) {
  EXPECT_TRUE(ChatFormat::NeedsBos("<|im_start|>user", true, "<s>"));
  EXPECT_FALSE(ChatFormat::NeedsBos("<s>[INST] hi", true, "<s>"));
  EXPECT_FALSE(ChatFormat::NeedsBos("<|im_start|>user", false, "<s>"));
  EXPECT_FALSE(ChatFormat::NeedsBos("anything", true, ""));
  // The template raises: its message is the error.
  const ChatFormat raising = ChatFormat::FromModel("{{ raise_exception('roles must alternate') }}");
  auto r = raising.Render(kConversation, nullptr, true, "<s>", "</s>");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "roles must alternate");
}

// A template whose names the subset does not have is found out when the
// model loads (a plain conversation is rendered once), not by every request.
TEST(ChatFormat, ATemplateThatFailsOnAPlainConversationIsNotUsed) {
  const ChatFormat unknown = ChatFormat::FromModel("<|im_start|>{{ messages | frobnicate }}");
  EXPECT_FALSE(unknown.is_jinja());
  EXPECT_EQ(unknown.builtin_kind(), ChatTemplateKind::kChatml);
  EXPECT_NE(unknown.fallback_reason().find("failed on a plain conversation"), std::string::npos)
      << unknown.fallback_reason();
  EXPECT_NE(unknown.fallback_reason().find("frobnicate"), std::string::npos) << unknown.fallback_reason();
  // Its own rule is kept: a template that refuses system turns refuses them.
  const ChatFormat strict = ChatFormat::FromModel(
      "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}"
      "{% endif %}{{ m.content }}{% endfor %}");
  ASSERT_TRUE(strict.is_jinja());
  auto r = strict.Render(kConversation, nullptr, true, "<s>", "</s>");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "System role not supported");
  // A failure that is the template's own fault is an internal error.
  const ChatFormat late = ChatFormat::FromModel("{% for m in messages %}{{ m.content }}{% endfor %}"
                                                "{% if messages | length > 4 %}{{ 1 / 0 }}{% endif %}");
  ASSERT_TRUE(late.is_jinja());
  std::vector<ChatMessage> five = kConversation;
  five.emplace_back("assistant", "x");
  EXPECT_EQ(late.Render(five, nullptr, true, "<s>", "</s>").status().code(), StatusCode::kInternal);
}

// Models generated before the Llama-2-shaped template carried one that meant
// that shape; they are still rendered as it.
TEST(ChatFormat, TheFirstPresetTemplateIsRenderedAsTheBuiltinLlama2Shape) {
  const ChatFormat old = ChatFormat::FromModel(
      "{% for m in messages %}{% if m['role'] == 'user' %}{{ bos_token + '[INST] ' + "
      "m['content'] + ' [/INST]' }}{% else %}{{ ' ' + m['content'] + eos_token }}"
      "{% endif %}{% endfor %}");
  EXPECT_FALSE(old.is_jinja());
  EXPECT_EQ(old.builtin_kind(), ChatTemplateKind::kLlama2);
  auto r = old.Render(kConversation, nullptr, true, "<s>", "</s>");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, Render(ChatTemplateKind::kLlama2, kConversation, true, "<s>"));
}

// strftime_now prints a fixed day, so a prompt renders the same whenever it
// is replayed; --chat-date sets it.
TEST(ChatFormat, TodayIsAFixedDay) {
  ChatFormat f = ChatFormat::FromModel("Today: {{ strftime_now('%d %b %Y') }}{% for m in messages %}{% endfor %}");
  ASSERT_TRUE(f.is_jinja()) << f.Describe();
  auto r = f.Render(kConversation, nullptr, true, "<s>", "</s>");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "Today: 26 Jul 2024");
  f.set_date(1767225600);  // 2026-01-01
  EXPECT_EQ(*f.Render(kConversation, nullptr, true, "<s>", "</s>"), "Today: 01 Jan 2026");
}

}  // namespace
}  // namespace tandem
