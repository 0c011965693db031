// Content never becomes control (ARCHITECTURE.md, invariant 7). A chat prompt
// is rendered by a template from two kinds of text: the template's own (its
// turn markers, which must become control tokens) and the client's (message
// contents, tool calls' arguments, tool results and tool descriptions, which
// must stay text whatever they spell). The template sees only strings, so
// each spelling of a control token in the client's text is marked before
// rendering — replaced by a private-use marker no template alters (U+10FFFD,
// the token's id, U+10FFFC) — and unmarked after, which gives back the
// client's exact text and the byte ranges the tokenizer must keep as text
// (Tokenizer::Encode with `literal` ranges). Text without such spellings is
// untouched, so ordinary prompts render and tokenize exactly as before.
// User-defined tokens (Qwen's <think>, <tool_call>: plain text that a
// vocabulary keeps whole) are left as they are, as llama.cpp and Hugging Face
// tokenize them, and templates that look for them in content still see them.
//
// Not covered: a template that cuts a string inside a marker (slicing), and a
// special token spelled across the boundary of client text and template text.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer.h"

namespace tandem {

// The client's text with every control token's spelling (and every U+10FFFD
// already in it) marked.
std::string MarkLiteral(const Tokenizer& tokenizer, std::string_view client_text);

struct UnmarkedPrompt {
  std::string text;
  std::vector<Tokenizer::TextRange> literal;  // sorted: the client's spellings of special tokens
};
// The rendered prompt with the marks taken out again.
UnmarkedPrompt UnmarkLiteral(const Tokenizer& tokenizer, std::string_view rendered);

}  // namespace tandem
