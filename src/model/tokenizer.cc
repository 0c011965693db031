// Loading and validating the vocab, special-token splitting, detokenizing.
// The two encoders live in tokenizer_spm.cc and tokenizer_bpe.cc.
#include "model/tokenizer.h"

#include <algorithm>
#include <cstdlib>

#include "model/unicode.h"

namespace tandem {
namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD
constexpr std::string_view kSpmSpace = "\xE2\x96\x81";         // U+2581 "▁"

// Spellings of end-of-turn markers across model families. A token counts only
// if the vocab marks it control or user-defined, never ordinary text.
constexpr std::string_view kEndOfTurnTexts[] = {
    "<|eot_id|>",    "<|eom_id|>",    "<|im_end|>",      "<|end|>",
    "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
};

std::string FieldName(const char* key) { return std::string("tokenizer.ggml.") + key; }

bool IsSignedType(GgufType t) {
  return t == GgufType::kInt8 || t == GgufType::kInt16 || t == GgufType::kInt32 ||
         t == GgufType::kInt64;
}

// Reads an optional token id; -1 (or its unsigned spelling) means absent.
StatusOr<int32_t> OptionalTokenId(const GgufFile& gguf, const std::string& key, size_t vocab_size) {
  const GgufValue* v = gguf.Find(key);
  if (v == nullptr) return int32_t{-1};
  if (IsSignedType(v->type) ? v->i == -1 : (v->u == 0xFFFFFFFFu || v->u == UINT64_MAX)) {
    return int32_t{-1};
  }
  TANDEM_ASSIGN_OR_RETURN(uint64_t id, gguf.GetUint(key));
  if (id >= vocab_size) {
    return DataLoss("GGUF metadata '" + key + "' = " + std::to_string(id) +
                    " is out of range for a vocab of " + std::to_string(vocab_size) + " tokens");
  }
  return int32_t(id);
}

StatusOr<bool> OptionalBool(const GgufFile& gguf, const std::string& key, bool fallback) {
  if (gguf.Find(key) == nullptr) return fallback;
  return gguf.GetBool(key);
}

// "<0xAB>" -> 0xAB.
bool ParseByteToken(std::string_view text, uint8_t* byte) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return false;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    int digit = (c >= '0' && c <= '9')   ? c - '0'
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                         : -1;
    if (digit < 0) return false;
    value = value * 16 + digit;
  }
  *byte = uint8_t(value);
  return true;
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& gguf) {
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  TANDEM_RETURN_IF_ERROR(tok->LoadVocab(gguf));
  TANDEM_RETURN_IF_ERROR(tok->LoadSpecialIds(gguf));
  TANDEM_RETURN_IF_ERROR(tok->LoadByteTokens());
  if (tok->kind_ == Kind::kBpe) TANDEM_RETURN_IF_ERROR(tok->LoadMerges(gguf));
  tok->IndexSpecialTokens();
  for (int32_t id = 0; id < tok->vocab_size(); ++id) {
    tok->max_token_bytes_ = std::max({tok->max_token_bytes_, tok->TokenBytes(id).size(), tok->TokenText(id).size()});
  }
  return tok;
}

Status Tokenizer::LoadVocab(const GgufFile& gguf) {
  TANDEM_ASSIGN_OR_RETURN(std::string model, gguf.GetString(FieldName("model")));
  if (model == "llama") {
    kind_ = Kind::kSpm;
  } else if (model == "gpt2") {
    kind_ = Kind::kBpe;
  } else {
    return InvalidArgument("tokenizer.ggml.model '" + model +
                           "' is not supported (expected 'llama' or 'gpt2')");
  }
  TANDEM_ASSIGN_OR_RETURN(tokens_, gguf.GetStringArray(FieldName("tokens")));
  if (tokens_.empty()) return DataLoss("tokenizer.ggml.tokens is empty");
  if (tokens_.size() > size_t(INT32_MAX)) return DataLoss("tokenizer.ggml.tokens is too large");
  const size_t n = tokens_.size();
  auto length_error = [n](const char* key, size_t got) {
    return DataLoss(FieldName(key) + " has " + std::to_string(got) +
                    " entries but tokenizer.ggml.tokens has " + std::to_string(n));
  };
  if (gguf.Find(FieldName("scores")) != nullptr) {
    TANDEM_ASSIGN_OR_RETURN(scores_, gguf.GetFloatArray(FieldName("scores")));
    if (scores_.size() != n) return length_error("scores", scores_.size());
  } else if (kind_ == Kind::kSpm) {
    return NotFound("tokenizer.ggml.scores is missing (required for 'llama' vocabs)");
  } else {
    scores_.assign(n, 0.0f);
  }
  types_.assign(n, TokenType::kNormal);
  if (gguf.Find(FieldName("token_type")) != nullptr) {
    TANDEM_ASSIGN_OR_RETURN(std::vector<int64_t> types, gguf.GetIntArray(FieldName("token_type")));
    if (types.size() != n) return length_error("token_type", types.size());
    for (size_t i = 0; i < n; ++i) {
      if (types[i] < 0 || types[i] > int64_t(TokenType::kByte)) {
        return DataLoss("tokenizer.ggml.token_type[" + std::to_string(i) +
                        "] = " + std::to_string(types[i]) + " is not a known token type");
      }
      types_[i] = TokenType(types[i]);
    }
  } else if (kind_ == Kind::kSpm) {
    uint8_t byte;  // without types, recognise byte tokens by their spelling
    for (size_t i = 0; i < n; ++i) {
      if (ParseByteToken(tokens_[i], &byte)) types_[i] = TokenType::kByte;
    }
  }
  token_ids_.reserve(n);
  for (size_t i = 0; i < n; ++i) token_ids_.emplace(tokens_[i], int32_t(i));
  return Status::Ok();
}

Status Tokenizer::LoadSpecialIds(const GgufFile& gguf) {
  const size_t n = tokens_.size();
  TANDEM_ASSIGN_OR_RETURN(bos_, OptionalTokenId(gguf, FieldName("bos_token_id"), n));
  TANDEM_ASSIGN_OR_RETURN(eos_, OptionalTokenId(gguf, FieldName("eos_token_id"), n));
  TANDEM_ASSIGN_OR_RETURN(unk_, OptionalTokenId(gguf, FieldName("unknown_token_id"), n));
  TANDEM_ASSIGN_OR_RETURN(pad_, OptionalTokenId(gguf, FieldName("padding_token_id"), n));
  for (const char* key : {"eot_token_id", "eom_token_id"}) {
    TANDEM_ASSIGN_OR_RETURN(int32_t id, OptionalTokenId(gguf, FieldName(key), n));
    if (id >= 0) end_of_generation_ids_.push_back(id);
  }
  if (eos_ >= 0) end_of_generation_ids_.push_back(eos_);
  const bool spm = kind_ == Kind::kSpm;
  TANDEM_ASSIGN_OR_RETURN(add_bos_, OptionalBool(gguf, FieldName("add_bos_token"), spm));
  TANDEM_ASSIGN_OR_RETURN(add_space_prefix_,
                          OptionalBool(gguf, FieldName("add_space_prefix"), spm));
  const std::string pre = gguf.GetStringOr(FieldName("pre"), "default");
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
    pre_ = PreTokenizerKind::kLlama3;
    ignore_merges_ = true;
  } else if (pre == "qwen2") {
    pre_ = PreTokenizerKind::kQwen2;
  } else {
    pre_ = PreTokenizerKind::kGpt2;
  }
  return Status::Ok();
}

Status Tokenizer::LoadByteTokens() {
  byte_tokens_.fill(-1);
  if (kind_ == Kind::kBpe) {
    for (int b = 0; b < 256; ++b) {
      std::string text;
      unicode::AppendUtf8(unicode::ByteToUnicode(uint8_t(b)), &text);
      if (auto id = FindToken(text)) byte_tokens_[b] = *id;
    }
    return Status::Ok();
  }
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (types_[i] != TokenType::kByte) continue;
    uint8_t byte = 0;
    if (!ParseByteToken(tokens_[i], &byte)) {
      return DataLoss("tokenizer.ggml.tokens[" + std::to_string(i) + "] '" + tokens_[i] +
                      "' has token_type byte but is not spelled <0xXX>");
    }
    if (byte_tokens_[byte] < 0) byte_tokens_[byte] = int32_t(i);
  }
  return Status::Ok();
}

void Tokenizer::IndexSpecialTokens() {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const TokenType t = types_[i];
    if ((t != TokenType::kControl && t != TokenType::kUserDefined) || tokens_[i].empty()) continue;
    special_by_first_byte_[uint8_t(tokens_[i][0])].push_back(int32_t(i));
    for (std::string_view eot : kEndOfTurnTexts) {
      if (tokens_[i] == eot) end_of_generation_ids_.push_back(int32_t(i));
    }
  }
  for (auto& bucket : special_by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(), [this](int32_t a, int32_t b) {
      return tokens_[a].size() > tokens_[b].size();
    });
  }
}

int32_t Tokenizer::MatchSpecialAt(std::string_view text, size_t pos) const {
  for (int32_t id : special_by_first_byte_[uint8_t(text[pos])]) {
    if (text.substr(pos).starts_with(tokens_[id])) return id;
  }
  return -1;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_bos,
                                       bool parse_special) const {
  return Encode(text, add_bos, parse_special, {});
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_bos, bool parse_special,
                                       std::span<const TextRange> literal) const {
  std::vector<int32_t> out;
  size_t next_literal = 0;  // the first range that does not end at or before pos
  auto inside_literal = [&](size_t begin, size_t end) {
    while (next_literal < literal.size() && literal[next_literal].end <= begin) ++next_literal;
    return next_literal < literal.size() && literal[next_literal].begin < end;
  };
  if (add_bos && bos_ >= 0) out.push_back(bos_);
  bool after_special = true;  // the first fragment counts as following a special token
  size_t fragment_start = 0;
  auto encode_fragment = [&](size_t end) {
    if (end <= fragment_start) return;
    const std::string_view fragment = text.substr(fragment_start, end - fragment_start);
    if (kind_ == Kind::kSpm) {
      EncodeSpm(fragment, add_space_prefix_ && after_special, &out);
    } else {
      EncodeBpe(fragment, &out);
    }
    after_special = false;
  };
  if (parse_special) {
    for (size_t pos = 0; pos < text.size();) {
      const int32_t id = MatchSpecialAt(text, pos);
      if (id < 0 || inside_literal(pos, pos + tokens_[id].size())) {
        ++pos;
        continue;
      }
      encode_fragment(pos);
      out.push_back(id);
      pos += tokens_[id].size();
      fragment_start = pos;
      after_special = true;
    }
  }
  encode_fragment(text.size());
  return out;
}

void Tokenizer::AppendByteFallback(std::string_view bytes, std::vector<int32_t>* out) const {
  bool all_known = true;
  for (char c : bytes) all_known = all_known && byte_tokens_[uint8_t(c)] >= 0;
  if (all_known) {
    for (char c : bytes) out->push_back(byte_tokens_[uint8_t(c)]);
  } else if (unk_ >= 0) {
    out->push_back(unk_);  // like SentencePiece without byte fallback: one <unk> per piece
  }
}

std::string Tokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  const std::string& text = tokens_[id];
  switch (types_[id]) {
    case TokenType::kControl:
      return "";
    case TokenType::kUnknown:
      return std::string(kReplacementChar);
    case TokenType::kUserDefined:
      return text;
    case TokenType::kByte: {
      uint8_t byte = 0;
      if (kind_ == Kind::kSpm && ParseByteToken(text, &byte)) return std::string(1, char(byte));
      break;  // a BPE vocab's "byte" token is byte-level text like any other
    }
    default:
      break;
  }
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    if (kind_ == Kind::kSpm) {
      if (text.compare(pos, kSpmSpace.size(), kSpmSpace) == 0) {
        out.push_back(' ');
        pos += kSpmSpace.size();
      } else {
        out.push_back(text[pos++]);
      }
      continue;
    }
    const unicode::DecodedChar ch = unicode::DecodeAt(text, pos);
    const int byte = ch.valid ? unicode::UnicodeToByte(ch.code_point) : -1;
    if (byte >= 0) {
      out.push_back(char(byte));
    } else {
      out.append(text, pos, ch.length);  // not byte-level: keep the text as it is
    }
    pos += ch.length;
  }
  return out;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids) const {
  std::string out;
  bool strip_space = kind_ == Kind::kSpm && add_space_prefix_;
  for (int32_t id : ids) {
    std::string piece = TokenBytes(id);
    if (piece.empty()) continue;
    if (strip_space && piece[0] == ' ') piece.erase(0, 1);
    strip_space = false;
    out += piece;
  }
  return out;
}

bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  return std::find(end_of_generation_ids_.begin(), end_of_generation_ids_.end(), id) !=
         end_of_generation_ids_.end();
}

const std::string& Tokenizer::TokenText(int32_t id) const {
  static const std::string kEmpty;
  return id >= 0 && id < vocab_size() ? tokens_[id] : kEmpty;
}

TokenType Tokenizer::token_type(int32_t id) const {
  return id >= 0 && id < vocab_size() ? types_[id] : TokenType::kUndefined;
}

std::optional<int32_t> Tokenizer::FindToken(std::string_view text) const {
  auto it = token_ids_.find(std::string(text));
  if (it == token_ids_.end()) return std::nullopt;
  return it->second;
}

std::string StreamDecoder::Push(int32_t id) {
  pending_ += tokenizer_.TokenBytes(id);
  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    unicode::SequenceStatus status;
    const int n = unicode::ClassifySequence(pending_, pos, &status);
    if (status == unicode::SequenceStatus::kIncomplete) break;  // wait for more bytes
    if (status == unicode::SequenceStatus::kComplete) {
      out.append(pending_, pos, n);
    } else {
      out += kReplacementChar;
    }
    pos += n;
  }
  pending_.erase(0, pos);
  return out;
}

std::string StreamDecoder::Flush() {
  std::string out = pending_.empty() ? "" : std::string(kReplacementChar);
  pending_.clear();
  return out;
}

}  // namespace tandem
