// Pre-tokenizers for byte-level BPE: split text into words before merging, as
// the regular expressions of GPT-2, llama-3 and Qwen2 do. Written as scanners
// because std::regex has no Unicode classes; letters and digits come from the
// approximate classifier in unicode.h.
#pragma once

#include <string_view>
#include <vector>

namespace tandem {

enum class PreTokenizerKind {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  //  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // As llama-3, but digits one at a time (\p{N} instead of \p{N}{1,3}).
  kQwen2,
};

// The words of `text` in order; they are views into it and concatenate back to
// it exactly, whatever the bytes (invalid UTF-8 bytes count as punctuation).
std::vector<std::string_view> PreTokenize(std::string_view text, PreTokenizerKind kind);

}  // namespace tandem
