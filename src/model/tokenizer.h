// Tokenizers built from GGUF metadata: SentencePiece-style ("llama") and
// GPT-2 byte-level BPE ("gpt2"), plus a streaming UTF-8 detokenizer.
//
// Thread safety: a Tokenizer is immutable after FromGguf, so its const
// methods may be called from any number of threads. A StreamDecoder holds
// per-stream state and belongs to one thread at a time.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "model/gguf.h"
#include "model/pretokenizer.h"

namespace tandem {

// GGUF token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

class Tokenizer {
 public:
  // Reads tokenizer.ggml.{model, tokens, scores, token_type, merges, bos_token_id,
  // eos_token_id, unknown_token_id, padding_token_id, eot_token_id, add_bos_token,
  // add_space_prefix, pre}. Malformed metadata gives a Status naming the field.
  // An id of 0xFFFFFFFF (or -1) means "absent", as converters write it.
  static StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& gguf);

  // Text to ids. add_bos prepends the BOS token when the vocab has one.
  // parse_special: text spelling a control or user-defined token becomes that
  // token (longest match first); otherwise such text is ordinary text.
  // SPM, like llama.cpp: with add_space_prefix, a space is prepended to the
  // first text fragment and to every fragment that follows a special token.
  std::vector<int32_t> Encode(std::string_view text, bool add_bos, bool parse_special) const;
  // The same, except that no special token is matched where it would touch a
  // byte of a `literal` range (sorted, disjoint): there the text is text,
  // tokenized together with what surrounds it (model/literal_text.h).
  struct TextRange {
    size_t begin = 0, end = 0;
  };
  std::vector<int32_t> Encode(std::string_view text, bool add_bos, bool parse_special,
                              std::span<const TextRange> literal) const;
  // The longest control or user-defined token spelled at text[pos], or -1.
  // REQUIRES: pos < text.size().
  int32_t MatchSpecialAt(std::string_view text, size_t pos) const;

  // The bytes one token stands for: byte tokens give their byte, SPM "▁" is a
  // space, GPT-2 byte-level characters map back to bytes, user-defined tokens
  // give their text verbatim. Control tokens give "", unknown tokens U+FFFD,
  // ids out of range "".
  std::string TokenBytes(int32_t id) const;

  // Concatenated TokenBytes. For SPM vocabs with add_space_prefix, one leading
  // space is removed from the first non-empty piece (llama.cpp's detokenize
  // does the same), so Decode(Encode(text, ...)) == text.
  std::string Decode(std::span<const int32_t> ids) const;

  int32_t vocab_size() const { return int32_t(tokens_.size()); }
  // The most bytes of text one token stands for (as text or as a special
  // token's marker): a text of n bytes encodes to at least n / this tokens.
  size_t max_token_bytes() const { return max_token_bytes_; }
  int32_t bos_id() const { return bos_; }  // -1 if absent
  int32_t eos_id() const { return eos_; }  // -1 if absent
  int32_t unk_id() const { return unk_; }  // -1 if absent
  int32_t pad_id() const { return pad_; }  // -1 if absent
  bool add_bos() const { return add_bos_ && bos_ >= 0; }
  bool is_spm() const { return kind_ == Kind::kSpm; }

  // EOS, EOT, and control tokens spelled like an end-of-turn marker
  // (<|eot_id|>, <|im_end|>, <|end|>, <end_of_turn>, <|endoftext|>, ...).
  bool IsEndOfGeneration(int32_t id) const;

  // Raw vocab string (empty for ids out of range).
  const std::string& TokenText(int32_t id) const;
  TokenType token_type(int32_t id) const;
  std::optional<int32_t> FindToken(std::string_view text) const;

 private:
  enum class Kind { kSpm, kBpe };

  struct Merge {
    int32_t rank;
    int32_t result;
  };

  Tokenizer() = default;

  Status LoadVocab(const GgufFile& gguf);
  Status LoadSpecialIds(const GgufFile& gguf);
  Status LoadByteTokens();
  Status LoadMerges(const GgufFile& gguf);
  void IndexSpecialTokens();

  // Appends the tokens of a text fragment containing no special tokens.
  void EncodeSpm(std::string_view text, bool prefix_space, std::vector<int32_t>* out) const;
  void EncodeBpe(std::string_view text, std::vector<int32_t>* out) const;
  void EncodeBpeWord(std::string_view word, std::vector<int32_t>* out) const;
  void AppendByteFallback(std::string_view bytes, std::vector<int32_t>* out) const;
  bool CanMergeInto(int32_t id) const;
  const Merge* FindMerge(int32_t left, int32_t right) const;

  Kind kind_ = Kind::kSpm;
  PreTokenizerKind pre_ = PreTokenizerKind::kGpt2;
  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<TokenType> types_;
  size_t max_token_bytes_ = 1;
  std::unordered_map<std::string, int32_t> token_ids_;  // first id wins for duplicates
  // SPM: the <0xXX> tokens; BPE: the single byte-level characters. -1 if absent.
  std::array<int32_t, 256> byte_tokens_{};
  std::unordered_map<uint64_t, Merge> merges_;  // key: left id << 32 | right id
  // Control and user-defined tokens by first byte, longest first.
  std::array<std::vector<int32_t>, 256> special_by_first_byte_;
  std::vector<int32_t> end_of_generation_ids_;
  int32_t bos_ = -1, eos_ = -1, unk_ = -1, pad_ = -1;
  bool add_bos_ = false;
  bool add_space_prefix_ = false;
  bool ignore_merges_ = false;  // llama-3: a word already in the vocab is one token
};

// Turns a stream of token ids into valid UTF-8. Bytes of an incomplete UTF-8
// sequence (a character split across byte tokens) are held back until the
// sequence completes; bytes proven invalid become U+FFFD. Unlike Decode it
// strips no leading space: it decodes continuations, where spaces matter.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  // Text that became complete with this token.
  std::string Push(int32_t id);
  // Whatever remains; an incomplete tail becomes one U+FFFD. Resets the state.
  std::string Flush();

 private:
  const Tokenizer& tokenizer_;
  std::string pending_;  // an incomplete UTF-8 sequence, at most 3 bytes
};

}  // namespace tandem
