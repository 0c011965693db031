// A tokenizer and model description for the OpenAI API tests, built in
// memory from the default vocab, so the tests need no model file.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>
#include <variant>

#include "model/default_vocab.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "server/openai_api.h"

namespace tandem::testing_openai {

inline std::unique_ptr<Tokenizer> MakeTestTokenizer() {
  const VocabSpec spec = BuildDefaultVocab(1024);
  GgufWriter w;
  WriteDefaultTokenizer(spec, w);
  const std::vector<uint8_t> bytes = w.Serialize();
  auto gguf = GgufFile::Parse(bytes);
  if (!gguf.ok()) return nullptr;
  auto tok = Tokenizer::FromGguf(**gguf);  // keeps no pointers into the bytes
  return tok.ok() ? std::move(tok).value() : nullptr;
}

inline const Tokenizer& TestTokenizer() {
  static const std::unique_ptr<Tokenizer> tokenizer = MakeTestTokenizer();
  return *tokenizer;
}

// A built-in chat format that outlives every test.
inline const ChatFormat* BuiltinFormat(ChatTemplateKind kind) {
  static const ChatFormat formats[] = {ChatFormat::Builtin(ChatTemplateKind::kLlama2),
                                       ChatFormat::Builtin(ChatTemplateKind::kChatml),
                                       ChatFormat::Builtin(ChatTemplateKind::kLlama3),
                                       ChatFormat::Builtin(ChatTemplateKind::kPlain)};
  return &formats[int(kind)];
}

inline ModelInfo TestModel(ChatTemplateKind kind = ChatTemplateKind::kChatml,
                           int64_t context_length = 512) {
  ModelInfo m;
  m.id = "tiny";
  m.context_length = context_length;
  m.tokenizer = &TestTokenizer();
  m.chat_format = BuiltinFormat(kind);
  m.created = 1700000000;
  return m;
}

// The request on success; fails the test (and returns a default) otherwise.
inline ParsedRequest ExpectParsed(const ParseResult& r) {
  if (const ApiError* e = std::get_if<ApiError>(&r)) {
    ADD_FAILURE() << "unexpected error " << e->http_status << ": " << e->message;
    return {};
  }
  return std::get<ParsedRequest>(r);
}

inline ApiError ExpectError(const ParseResult& r) {
  if (!std::holds_alternative<ApiError>(r)) {
    ADD_FAILURE() << "expected an error, got a parsed request";
    return {};
  }
  return std::get<ApiError>(r);
}

}  // namespace tandem::testing_openai
