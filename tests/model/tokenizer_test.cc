#include "model/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "model/default_vocab.h"
#include "model/pretokenizer.h"
#include "model/unicode.h"
#include "support/paths.h"

namespace tandem {
namespace {

using Ids = std::vector<int32_t>;
const std::string kReplacement = "\xEF\xBF\xBD";

StatusOr<std::unique_ptr<Tokenizer>> FromWriter(const GgufWriter& writer) {
  const std::vector<uint8_t> bytes = writer.Serialize();
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> gguf, GgufFile::Parse(bytes));
  return Tokenizer::FromGguf(*gguf);  // the tokenizer keeps no pointers into the file
}

std::unique_ptr<Tokenizer> LoadStories(const std::string& path) {
  auto gguf = GgufFile::Open(path);
  EXPECT_TRUE(gguf.ok()) << gguf.status().ToString();
  if (!gguf.ok()) return nullptr;
  auto tok = Tokenizer::FromGguf(**gguf);
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  return tok.ok() ? std::move(tok).value() : nullptr;
}

// Strings that exercise spaces, newlines, non-ASCII, emoji and invalid UTF-8.
std::vector<std::string> RoundTripCorpus() {
  std::vector<std::string> corpus = {
      "",
      "Once upon a time",
      " leading space",
      "  two  spaces  ",
      "tab\there\n",
      "\n\nline",
      "café naïve",
      "日本語のテキスト",
      "Привет, мир!",
      "emoji 🍕🎉 ok",
      "it's 12345 o'clock",
      "x\xff\xfe y",
      "\xe2\x82",
      "<s>not special</s>",
      "trailing ",
  };
  std::mt19937 rng(1234);
  const std::vector<std::string> alphabet = {"a", "Z", " ",  "  ",   "\n",   "'s", "7",  "é",
                                             "€", "🍕", "語", "\x80", "\xc3", "!",  "\t", "ab"};
  for (int n = 0; n < 200; ++n) {
    std::string s;
    const int len = int(rng() % 12);
    for (int k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
    corpus.push_back(s);
  }
  return corpus;
}

// ---------------------------------------------------------------- stories260K (SPM)

TEST(SpmTokenizer, Stories260kVocabLayout) {
  TANDEM_REQUIRE_SHARED_MODEL(path);
  auto tok = LoadStories(path);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_TRUE(tok->is_spm());
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->unk_id(), 0);
  EXPECT_EQ(tok->pad_id(), -1);  // stored as 0xFFFFFFFF
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(tok->TokenText(0), "<unk>");
  EXPECT_EQ(tok->TokenText(1), "<s>");
  EXPECT_EQ(tok->TokenText(2), "</s>");
  EXPECT_EQ(tok->TokenText(3), "<0x00>");
  EXPECT_EQ(tok->TokenText(258), "<0xFF>");
  EXPECT_EQ(tok->token_type(3), TokenType::kByte);
  EXPECT_EQ(tok->FindToken("▁Lily"), 317);
  EXPECT_TRUE(tok->IsEndOfGeneration(2));
  EXPECT_FALSE(tok->IsEndOfGeneration(1));
}

// Expected ids were worked out by hand from the vocab's scores (see the report
// in the change description): e.g. "Hello world!" -> "▁Hello▁world!"; the best
// pairs merge in order ▁w(-4) or(-45) ll(-47) ▁H(-61) ld(-82) ▁He(-87), and no
// further pair ("▁Hell", "▁wor", "orld", ...) is a piece.
TEST(SpmTokenizer, Stories260kKnownIds) {
  TANDEM_REQUIRE_SHARED_MODEL(path);
  auto tok = LoadStories(path);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Encode("Once upon a time", true, false), (Ids{1, 403, 407, 261, 378}));
  EXPECT_EQ(tok->Encode("Lily", true, false), (Ids{1, 317}));
  EXPECT_EQ(tok->Encode("Hello world!", false, false), (Ids{346, 306, 414, 263, 304, 341, 443}));
  EXPECT_EQ(tok->Encode("café", false, false), (Ids{280, 412, 431, 485}));  // é is a piece
  // 🍕 = F0 9F 8D 95 is not a piece: byte fallback, byte b is id 3 + b.
  EXPECT_EQ(tok->Encode("I like 🍕.", false, false),
            (Ids{359, 397, 354, 410, 3 + 0xF0, 3 + 0x9F, 3 + 0x8D, 3 + 0x95, 426}));
  EXPECT_EQ(tok->Encode("", true, false), (Ids{1}));
  EXPECT_EQ(tok->Encode("", false, false), (Ids{}));
}

TEST(SpmTokenizer, Stories260kSpecialTokensOnlyWhenParsed) {
  TANDEM_REQUIRE_SHARED_MODEL(path);
  auto tok = LoadStories(path);
  ASSERT_NE(tok, nullptr);
  // Like llama.cpp, the text after a special token gets the space prefix too.
  EXPECT_EQ(tok->Encode("<s>Hi</s>", false, true), (Ids{1, 320, 417, 2}));
  const Ids plain = tok->Encode("<s>Hi</s>", false, false);
  for (int32_t id : plain) EXPECT_GT(id, 2) << "special token matched without parse_special";
  EXPECT_EQ(tok->Decode(plain), "<s>Hi</s>");
}

TEST(SpmTokenizer, Stories260kTokenBytesAndDecode) {
  TANDEM_REQUIRE_SHARED_MODEL(path);
  auto tok = LoadStories(path);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->TokenBytes(1), "");
  EXPECT_EQ(tok->TokenBytes(2), "");
  EXPECT_EQ(tok->TokenBytes(0), kReplacement);
  EXPECT_EQ(tok->TokenBytes(3 + 'A'), "A");
  EXPECT_EQ(tok->TokenBytes(410), " ");
  EXPECT_EQ(tok->TokenBytes(317), " Lily");
  EXPECT_EQ(tok->TokenBytes(-1), "");
  EXPECT_EQ(tok->TokenBytes(512), "");
  // One leading space is dropped, after skipping control tokens.
  EXPECT_EQ(tok->Decode(Ids{1, 317, 263}), "Lily w");
  EXPECT_EQ(tok->Decode(Ids{410, 317}), " Lily");
}

TEST(SpmTokenizer, Stories260kRoundTrip) {
  TANDEM_REQUIRE_SHARED_MODEL(path);
  auto tok = LoadStories(path);
  ASSERT_NE(tok, nullptr);
  for (const std::string& s : RoundTripCorpus()) {
    EXPECT_EQ(tok->Decode(tok->Encode(s, true, false)), s);
    EXPECT_EQ(tok->Decode(tok->Encode(s, false, true)), s.find("<s>") == 0 ? "not special" : s);
  }
}

// A vocab where the merge order decides the result: "abc" can become ab+c or a+bc.
TEST(SpmTokenizer, HighestScoreThenLeftmostPairMergesFirst) {
  for (float bc_score : {-0.5f, -1.0f, -2.0f}) {
    GgufWriter w;
    w.SetString("tokenizer.ggml.model", "llama");
    w.SetStringArray("tokenizer.ggml.tokens", {"<unk>", "a", "b", "c", "ab", "bc"});
    w.SetFloatArray("tokenizer.ggml.scores", {0, -3, -3, -3, -1, bc_score});
    w.SetInt32Array("tokenizer.ggml.token_type", {2, 1, 1, 1, 1, 1});
    w.SetBool("tokenizer.ggml.add_space_prefix", false);
    w.SetUint32("tokenizer.ggml.unknown_token_id", 0);
    auto tok = FromWriter(w);
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    const Ids expected = bc_score > -1.0f ? Ids{1, 5} : Ids{4, 3};  // ties go left
    EXPECT_EQ((*tok)->Encode("abc", false, false), expected) << "bc score " << bc_score;
    EXPECT_EQ((*tok)->Encode("abc d", false, false), (Ids{expected[0], expected[1], 0, 0}))
        << "no byte tokens: one <unk> per unknown character";
  }
}

TEST(StreamDecoder, HoldsSplitCharacterUntilComplete) {
  TANDEM_REQUIRE_SHARED_MODEL(path);
  auto tok = LoadStories(path);
  ASSERT_NE(tok, nullptr);
  StreamDecoder stream(*tok);
  EXPECT_EQ(stream.Push(317), " Lily");  // no leading-space strip when streaming
  EXPECT_EQ(stream.Push(3 + 0xF0), "");
  EXPECT_EQ(stream.Push(3 + 0x9F), "");
  EXPECT_EQ(stream.Push(3 + 0x8D), "");
  EXPECT_EQ(stream.Push(3 + 0x95), "🍕");
  EXPECT_EQ(stream.Push(426), ".");
  EXPECT_EQ(stream.Push(3 + 0xFF), kReplacement);       // can never start a character
  EXPECT_EQ(stream.Push(3 + 0xE2), "");                 // could start "€"...
  EXPECT_EQ(stream.Push(3 + 'A'), kReplacement + "A");  // ...but 'A' proves it invalid
  EXPECT_EQ(stream.Push(1), "");                        // control tokens add nothing
  EXPECT_EQ(stream.Push(3 + 0xE2), "");
  EXPECT_EQ(stream.Push(3 + 0x82), "");
  EXPECT_EQ(stream.Flush(), kReplacement);  // an incomplete tail
  EXPECT_EQ(stream.Flush(), "");
}

// ---------------------------------------------------------------- default vocab

GgufWriter DefaultVocabWriter(const VocabSpec& spec) {
  GgufWriter w;
  WriteDefaultTokenizer(spec, w);
  return w;
}

TEST(DefaultVocab, LayoutIsDeterministic) {
  const VocabSpec spec = BuildDefaultVocab(512);
  ASSERT_EQ(spec.tokens.size(), 512u);
  ASSERT_EQ(spec.scores.size(), 512u);
  ASSERT_EQ(spec.types.size(), 512u);
  EXPECT_EQ(spec.tokens[0], "<unk>");
  EXPECT_EQ(spec.types[0], 2);
  EXPECT_EQ(spec.tokens[1], "<s>");
  EXPECT_EQ(spec.tokens[2], "</s>");
  EXPECT_EQ(spec.types[2], 3);
  EXPECT_EQ(spec.tokens[3], "<0x00>");
  EXPECT_EQ(spec.tokens[3 + 0xAB], "<0xAB>");
  EXPECT_EQ(spec.types[258], 6);
  EXPECT_EQ(spec.tokens[259], "▁");
  for (size_t i = 260; i < spec.scores.size(); ++i) {
    EXPECT_EQ(spec.types[i], 1);
    ASSERT_LT(spec.scores[i], spec.scores[i - 1]) << "at id " << i;
  }
  EXPECT_EQ(BuildDefaultVocab(512).tokens, spec.tokens);
  const VocabSpec big = BuildDefaultVocab(32000);
  EXPECT_EQ(big.tokens.size(), 32000u);
  EXPECT_EQ(std::set<std::string>(big.tokens.begin(), big.tokens.end()).size(), 32000u);
}

TEST(DefaultVocab, EncodesWordsAndRoundTrips) {
  for (int32_t size : {512, 4096}) {
    auto tok = FromWriter(DefaultVocabWriter(BuildDefaultVocab(size)));
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    for (const std::string& s : RoundTripCorpus()) {
      ASSERT_EQ((*tok)->Decode((*tok)->Encode(s, true, false)), s) << "vocab " << size;
    }
  }
  auto tok = FromWriter(DefaultVocabWriter(BuildDefaultVocab(4096)));
  ASSERT_TRUE(tok.ok());
  const Ids ids = (*tok)->Encode("Once upon a time, the little friend", false, false);
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back((*tok)->TokenText(id));
  EXPECT_EQ(pieces, (std::vector<std::string>{"▁Once", "▁upon", "▁a", "▁time", ",", "▁the",
                                              "▁little", "▁friend"}));
}

// ---------------------------------------------------------------- byte-level BPE

std::string ByteChar(char c) {
  std::string s;
  unicode::AppendUtf8(unicode::ByteToUnicode(uint8_t(c)), &s);
  return s;
}
const std::string G = ByteChar(' ');   // "Ġ"
const std::string C = ByteChar('\n');  // "Ċ"

// 256 byte-level tokens (id = byte), merged tokens, an unmergeable "Ġxyz",
// then control tokens.
GgufWriter BpeWriter(const std::string& pre) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(ByteChar(char(b)));
  const std::vector<std::string> merges = {
      G + " t", "h e", G + "t he",  "i n", G + " a",    "1 2",   "12 3",
      "4 5",    "' s", C + " " + C, "e l", "el l",      "ell o", "H ello",
      G + " w", "o r", G + "w or",  "l d", G + "wor ld"};
  for (const std::string& m : merges) {
    const size_t space = m.find(' ', 1);
    const std::string joined = m.substr(0, space) + m.substr(space + 1);
    if (std::find(tokens.begin(), tokens.end(), joined) == tokens.end()) tokens.push_back(joined);
  }
  tokens.push_back(G + "xyz");
  std::vector<int32_t> types(tokens.size(), 1);
  for (const char* special : {"<|im_start|>", "<|im_end|>", "<|endoftext|>"}) {
    tokens.push_back(special);
    types.push_back(3);
  }
  GgufWriter w;
  w.SetString("tokenizer.ggml.model", "gpt2");
  if (!pre.empty()) w.SetString("tokenizer.ggml.pre", pre);
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetInt32Array("tokenizer.ggml.token_type", types);
  w.SetStringArray("tokenizer.ggml.merges", merges);
  w.SetUint32("tokenizer.ggml.bos_token_id", uint32_t(tokens.size() - 1));
  w.SetUint32("tokenizer.ggml.eos_token_id", uint32_t(tokens.size() - 1));
  return w;
}

std::unique_ptr<Tokenizer> Bpe(const std::string& pre) {
  auto tok = FromWriter(BpeWriter(pre));
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  return tok.ok() ? std::move(tok).value() : nullptr;
}

std::vector<std::string> Words(std::string_view text, PreTokenizerKind kind) {
  std::vector<std::string> out;
  for (std::string_view w : PreTokenize(text, kind)) out.emplace_back(w);
  return out;
}
using W = std::vector<std::string>;

TEST(PreTokenizer, DigitsContractionsAndWhitespace) {
  const auto llama3 = PreTokenizerKind::kLlama3, qwen2 = PreTokenizerKind::kQwen2,
             gpt2 = PreTokenizerKind::kGpt2;
  EXPECT_EQ(Words("12345", llama3), (W{"123", "45"}));
  EXPECT_EQ(Words("12345", qwen2), (W{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(Words("12345", gpt2), (W{"12345"}));
  EXPECT_EQ(Words("it's", llama3), (W{"it", "'s"}));
  EXPECT_EQ(Words("IT'S WE'LL", llama3), (W{"IT", "'S", " WE", "'LL"}));
  EXPECT_EQ(Words("IT'S", gpt2), (W{"IT", "'", "S"}));  // gpt2's contractions are lowercase
  EXPECT_EQ(Words("Hello world", llama3), (W{"Hello", " world"}));
  EXPECT_EQ(Words("a  b", llama3), (W{"a", " ", " b"}));
  EXPECT_EQ(Words("end.\n\nNext", llama3), (W{"end", ".\n\n", "Next"}));
  EXPECT_EQ(Words("x  \n  hi  ", llama3), (W{"x", "  \n", " ", " hi", "  "}));
  EXPECT_EQ(Words("x  \n  hi", gpt2), (W{"x", "  \n ", " hi"}));
  EXPECT_EQ(Words("(hello", llama3), (W{"(hello"}));
  EXPECT_EQ(Words("(hello", gpt2), (W{"(", "hello"}));
  EXPECT_EQ(Words("Привет мир", llama3), (W{"Привет", " мир"}));
  EXPECT_EQ(Words("日本語テキスト", llama3), (W{"日本語テキスト"}));
  EXPECT_EQ(Words("२०२४", qwen2), (W{"२", "०", "२", "४"}));  // Devanagari digits
  EXPECT_EQ(Words("héllo wörld!!", llama3), (W{"héllo", " wörld", "!!"}));
}

TEST(PreTokenizer, WordsConcatenateToInput) {
  for (auto kind : {PreTokenizerKind::kGpt2, PreTokenizerKind::kLlama3, PreTokenizerKind::kQwen2}) {
    for (const std::string& s : RoundTripCorpus()) {
      std::string joined;
      for (std::string_view w : PreTokenize(s, kind)) {
        EXPECT_FALSE(w.empty());
        joined += w;
      }
      EXPECT_EQ(joined, s);
    }
  }
}

TEST(BpeTokenizer, MergesByRank) {
  auto tok = Bpe("qwen2");  // llama-3 would skip merges for words already in the vocab
  ASSERT_NE(tok, nullptr);
  EXPECT_FALSE(tok->is_spm());
  EXPECT_FALSE(tok->add_bos());  // gpt2 vocabs default to no BOS
  const int32_t the = *tok->FindToken(G + "the"), hello = *tok->FindToken("Hello"),
                world = *tok->FindToken(G + "world"), n123 = *tok->FindToken("123"),
                n45 = *tok->FindToken("45"), s = *tok->FindToken("'s"), nn = *tok->FindToken(C + C);
  EXPECT_EQ(tok->Encode("Hello world", false, false), (Ids{hello, world}));
  EXPECT_EQ(tok->Encode(" the", false, false), (Ids{the}));
  EXPECT_EQ(tok->Encode("12345", false, false), (Ids{'1', '2', '3', '4', '5'}));
  EXPECT_EQ(tok->Encode("it's\n\n", false, false), (Ids{'i', 't', s, nn}));
  EXPECT_EQ(tok->TokenBytes(the), " the");
  EXPECT_EQ(tok->TokenBytes(nn), "\n\n");
  auto llama3 = Bpe("llama-bpe");
  ASSERT_NE(llama3, nullptr);
  EXPECT_EQ(llama3->Encode("12345", false, false), (Ids{n123, n45}));
  EXPECT_EQ(llama3->Encode("Hello world", false, false), (Ids{hello, world}));
}

TEST(BpeTokenizer, LowestRankThenLeftmostPairMergesFirst) {
  for (bool yz_first : {true, false}) {
    GgufWriter w = BpeWriter("qwen2");
    std::vector<std::string> merges = {"x y", "y z"};
    if (yz_first) std::swap(merges[0], merges[1]);
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(ByteChar(char(b)));
    tokens.insert(tokens.end(), {"xy", "yz"});
    w.SetStringArray("tokenizer.ggml.tokens", tokens);
    w.SetInt32Array("tokenizer.ggml.token_type", std::vector<int32_t>(tokens.size(), 1));
    w.SetUint32("tokenizer.ggml.bos_token_id", 0);
    w.SetUint32("tokenizer.ggml.eos_token_id", 0);
    w.SetStringArray("tokenizer.ggml.merges", merges);
    auto tok = FromWriter(w);
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    EXPECT_EQ((*tok)->Encode("xyz", false, false), yz_first ? (Ids{'x', 257}) : (Ids{256, 'z'}));
  }
}

TEST(BpeTokenizer, Llama3TakesWholeWordsFromTheVocab) {
  const int32_t xyz = *Bpe("llama3")->FindToken(G + "xyz");
  EXPECT_EQ(Bpe("llama3")->Encode(" xyz", false, false), (Ids{xyz}));  // no merge path needed
  EXPECT_EQ(Bpe("qwen2")->Encode(" xyz", false, false), (Ids{uint8_t(' '), 'x', 'y', 'z'}));
}

TEST(BpeTokenizer, SpecialTokensAndEndOfGeneration) {
  auto tok = Bpe("qwen2");
  ASSERT_NE(tok, nullptr);
  const int32_t start = *tok->FindToken("<|im_start|>"), end = *tok->FindToken("<|im_end|>"),
                eot = *tok->FindToken("<|endoftext|>");
  const std::string text = "<|im_start|>user\nhi<|im_end|>";
  const Ids ids = tok->Encode(text, false, true);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), start);
  EXPECT_EQ(ids.back(), end);
  EXPECT_EQ(tok->Decode(ids), "user\nhi");  // control tokens decode to nothing
  const Ids plain = tok->Encode(text, false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), start), 0);
  EXPECT_EQ(tok->Decode(plain), text);
  EXPECT_TRUE(tok->IsEndOfGeneration(end));
  EXPECT_TRUE(tok->IsEndOfGeneration(eot));
  EXPECT_FALSE(tok->IsEndOfGeneration(start));
  EXPECT_EQ(tok->Encode("x", true, false), (Ids{eot, 'x'}));
}

TEST(BpeTokenizer, RoundTripsEveryPreTokenizer) {
  for (const char* pre : {"llama-bpe", "qwen2", "gpt2", ""}) {
    auto tok = Bpe(pre);
    ASSERT_NE(tok, nullptr);
    for (const std::string& s : RoundTripCorpus()) {
      ASSERT_EQ(tok->Decode(tok->Encode(s, false, false)), s) << "pre '" << pre << "'";
    }
  }
}

// ---------------------------------------------------------------- malformed metadata

void ExpectRejected(const GgufWriter& w, const std::string& field) {
  auto tok = FromWriter(w);
  ASSERT_FALSE(tok.ok()) << "accepted metadata with a bad " << field;
  EXPECT_NE(tok.status().message().find(field), std::string::npos) << tok.status().ToString();
}

TEST(TokenizerMetadata, RejectsMalformedFields) {
  const VocabSpec spec = BuildDefaultVocab(512);
  GgufWriter w = DefaultVocabWriter(spec);
  w.SetFloatArray("tokenizer.ggml.scores",
                  std::vector<float>(spec.scores.begin(), spec.scores.end() - 1));
  ExpectRejected(w, "tokenizer.ggml.scores");

  w = DefaultVocabWriter(spec);
  w.SetInt32Array("tokenizer.ggml.token_type", std::vector<int32_t>(10, 1));
  ExpectRejected(w, "tokenizer.ggml.token_type");

  w = DefaultVocabWriter(spec);
  std::vector<int32_t> types = spec.types;
  types[300] = 9;
  w.SetInt32Array("tokenizer.ggml.token_type", types);
  ExpectRejected(w, "tokenizer.ggml.token_type[300]");

  w = DefaultVocabWriter(spec);
  w.SetUint32("tokenizer.ggml.bos_token_id", 512);
  ExpectRejected(w, "tokenizer.ggml.bos_token_id");

  w = DefaultVocabWriter(spec);
  w.SetStringArray("tokenizer.ggml.tokens", {});
  ExpectRejected(w, "tokenizer.ggml.tokens");

  w = DefaultVocabWriter(spec);
  w.SetFloatArray("tokenizer.ggml.tokens", {1.0f});
  ExpectRejected(w, "tokenizer.ggml.tokens");

  w = DefaultVocabWriter(spec);
  std::vector<std::string> tokens = spec.tokens;
  tokens[5] = "<0xZZ>";
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  ExpectRejected(w, "tokenizer.ggml.tokens[5]");

  w = DefaultVocabWriter(spec);
  w.SetString("tokenizer.ggml.model", "bert");
  ExpectRejected(w, "tokenizer.ggml.model");

  GgufWriter missing;
  missing.SetString("tokenizer.ggml.model", "llama");
  ExpectRejected(missing, "tokenizer.ggml.tokens");
}

TEST(TokenizerMetadata, RejectsBadMerges) {
  GgufWriter w = BpeWriter("qwen2");
  w.SetStringArray("tokenizer.ggml.merges", {"h e", "he nosuchtoken"});
  ExpectRejected(w, "tokenizer.ggml.merges[1]");
  w.SetStringArray("tokenizer.ggml.merges", {"nospace"});
  ExpectRejected(w, "tokenizer.ggml.merges[0]");
  w.Set("tokenizer.ggml.merges", GgufValue{});  // a uint8, not an array
  ExpectRejected(w, "tokenizer.ggml.merges");
}

TEST(TokenizerMetadata, AllOnesIdMeansAbsent) {
  GgufWriter w = DefaultVocabWriter(BuildDefaultVocab(512));
  w.SetUint32("tokenizer.ggml.bos_token_id", 0xFFFFFFFFu);
  w.SetInt32("tokenizer.ggml.eos_token_id", -1);
  auto tok = FromWriter(w);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ((*tok)->bos_id(), -1);
  EXPECT_EQ((*tok)->eos_id(), -1);
  EXPECT_FALSE((*tok)->add_bos());
  EXPECT_EQ((*tok)->Encode("a", true, false).front(), *(*tok)->FindToken("▁a"));
}

}  // namespace
}  // namespace tandem
