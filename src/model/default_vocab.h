// The vocab written into generated models (mkmodel): a deterministic
// SentencePiece-style ("llama") vocab with byte fallback, so that any text
// round-trips through a model nobody trained.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

struct VocabSpec {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;  // GGUF token types (see TokenType in tokenizer.h)
};

// Layout: 0 <unk> (type 2), 1 <s> and 2 </s> (type 3), 3..258 the byte tokens
// <0x00>..<0xFF> (type 6), then ordinary pieces (type 1): "▁", each printable
// ASCII character alone and after "▁", common English words after "▁" (each
// preceded by its prefixes, so the SPM merge loop can reach it one character
// at a time), lowercase letter bigrams, then ever longer lowercase strings,
// until vocab_size. Ordinary pieces score -1, -2, ... in id order; special
// and byte tokens score 0. Every word prefix outranks every bigram, so the
// merge loop builds whole words instead of stranding them in bigrams.
// REQUIRES: vocab_size >= 512.
VocabSpec BuildDefaultVocab(int32_t vocab_size);

class GgufWriter;
// Writes `spec` as a llama (SentencePiece-style) tokenizer: tokens, scores,
// token types, <s> = 1, </s> = 2, <unk> = 0. The one place that metadata is spelled.
void WriteDefaultTokenizer(const VocabSpec& spec, GgufWriter& w);

}  // namespace tandem
