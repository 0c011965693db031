// Handoff wire messages: round trips, the exact header bytes, and decoding of
// untrusted bytes — every truncation, wrong header fields, huge counts and
// random corruption fail with DataLoss naming what was wrong, never a crash
// (this test is meant to run under ASan/UBSan too).
#include "transfer/messages.h"

#include <gtest/gtest.h>

#include <random>

namespace tandem {
namespace {

Hello SampleHello() {
  return {"decode", "page_tokens=64;layers=2;k:f32:32", "tiny:12345", 0x1122334455667788ull, 0};
}

Destination SampleDestination() {
  Destination d;
  d.handoff_id = 42;
  d.decode_instance_id = 7;
  d.skip_tokens = 64;
  for (int32_t t = 0; t < 150; ++t) d.tokens.push_back(t * 3 - 5);
  d.pages = {{5, 1}, {9, 0xFFFFFFFFu}};  // tokens [64, 150) span pages 1 and 2
  d.remote_key = {0xde, 0xad, 0xbe, 0xef, 0x00, 0x01};
  d.pool_pages = 1000;
  d.time_budget_ms = 60000;
  d.cache_salt = 0x5A17ED0123456789ull;
  d.auth.assign(32, 0xA5);
  return d;
}

Commit SampleCommit() {
  return {99, 0xABCDEF0123456789ull, 31337, {{"k", 1, 4096}, {"v", 2, 4096}, {"index_k", 0xFFFFFFFFFFFFFFFFull, 2112}}};
}

Abort SampleAbort() { return {42, AbortCode::kCancelled, "client went away"}; }
AbortAck SampleAbortAck() { return {42}; }
Heartbeat SampleHeartbeat() { return {0x0102030405060708ull}; }

// Decodes with the decoder PeekType picks; what a connection loop does.
Status DecodeAny(std::span<const uint8_t> bytes, std::vector<uint8_t>* reencoded) {
  TANDEM_ASSIGN_OR_RETURN(MessageType type, PeekType(bytes));
  auto run = [&](auto decoded) -> Status {
    if (!decoded.ok()) return decoded.status();
    *reencoded = decoded->Encode();
    return Status::Ok();
  };
  switch (type) {
    case MessageType::kHello:
      return run(Hello::Decode(bytes));
    case MessageType::kDestination:
      return run(Destination::Decode(bytes));
    case MessageType::kCommit:
      return run(Commit::Decode(bytes));
    case MessageType::kAbort:
      return run(Abort::Decode(bytes));
    case MessageType::kAbortAck:
      return run(AbortAck::Decode(bytes));
    case MessageType::kHeartbeat:
      return run(Heartbeat::Decode(bytes));
  }
  return Internal("unreachable");
}

std::vector<std::vector<uint8_t>> AllSamples() {
  return {SampleHello().Encode(), SampleDestination().Encode(), SampleCommit().Encode(),
          SampleAbort().Encode(), SampleAbortAck().Encode(), SampleHeartbeat().Encode()};
}

void PutU32(std::vector<uint8_t>& bytes, size_t at, uint32_t v) {
  for (size_t i = 0; i < 4; ++i) bytes[at + i] = uint8_t(v >> (8 * i));
}

::testing::AssertionResult IsDataLoss(const Status& s, const std::string& mentions = "") {
  if (s.code() != StatusCode::kDataLoss) return ::testing::AssertionFailure() << s.ToString();
  if (s.message().find(mentions) == std::string::npos) {
    return ::testing::AssertionFailure()
           << "'" << s.message() << "' does not mention '" << mentions << "'";
  }
  return ::testing::AssertionSuccess();
}

template <typename M>
void ExpectRoundTrip(const M& m) {
  const std::vector<uint8_t> bytes = m.Encode();
  auto type = PeekType(bytes);
  ASSERT_TRUE(type.ok()) << type.status().ToString();
  EXPECT_EQ(*type, M::kType);
  auto back = M::Decode(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, m);
  EXPECT_EQ(back->Encode(), bytes);
}

TEST(HandoffMessages, RoundTrip) {
  ExpectRoundTrip(SampleHello());
  ExpectRoundTrip(Hello{"prefill", "", "", 1, 0});
  ExpectRoundTrip(Hello{"prefill", "f", "w", 1, 2, std::vector<uint8_t>(32, 7), std::vector<uint8_t>(32, 9)});
  ExpectRoundTrip(Hello{"decode", "f", "w", 1, 2, {}, {}, "127.0.0.1:9", "numerics version=1;kernel variant="});
  Hello long_numerics{"decode", "f", "w", 1, 2, {}, {}, "", std::string(257, 'n')};
  EXPECT_TRUE(IsDataLoss(Hello::Decode(long_numerics.Encode()).status(), "'numerics'"));
  ExpectRoundTrip(SampleDestination());
  Destination whole_prompt_cached;
  whole_prompt_cached.tokens.assign(128, 1);
  whole_prompt_cached.skip_tokens = 128;
  whole_prompt_cached.time_budget_ms = 1;
  ExpectRoundTrip(whole_prompt_cached);
  Destination empty;
  empty.time_budget_ms = 24 * 3600 * 1000;
  ExpectRoundTrip(empty);
  ExpectRoundTrip(SampleCommit());
  ExpectRoundTrip(Commit{});
  ExpectRoundTrip(SampleAbort());
  ExpectRoundTrip(Abort{1, AbortCode::kRefused, ""});
  for (uint16_t code = 1; code <= kMaxAbortCode; ++code) ExpectRoundTrip(Abort{2, AbortCode(code), "why"});
  ExpectRoundTrip(SampleAbortAck());
  ExpectRoundTrip(SampleHeartbeat());
}

TEST(HandoffMessages, FieldsOutOfRangeAreRejectedByName) {
  Hello anonymous = SampleHello();
  anonymous.instance_id = 0;
  EXPECT_TRUE(IsDataLoss(Hello::Decode(anonymous.Encode()).status(), "'instance_id'"));
  for (int64_t budget : {int64_t(0), int64_t(-5), int64_t(24) * 3600 * 1000 + 1}) {
    Destination d = SampleDestination();
    d.time_budget_ms = budget;
    EXPECT_TRUE(IsDataLoss(Destination::Decode(d.Encode()).status(), "'time_budget_ms'")) << budget;
  }
  Commit negative = SampleCommit();
  negative.first_token = -1;
  EXPECT_TRUE(IsDataLoss(Commit::Decode(negative.Encode()).status(), "'first_token'"));
  for (uint16_t code : {uint16_t(0), uint16_t(kMaxAbortCode + 1), uint16_t(0xffff)}) {
    EXPECT_TRUE(IsDataLoss(Abort::Decode(Abort{1, AbortCode(code), "x"}.Encode()).status(), "'code'")) << code;
  }
}

TEST(HandoffMessages, PagesDigestCoversPagesAndGenerations) {
  const std::vector<PageRef> a = {{5, 1}, {9, 2}};
  EXPECT_EQ(PagesDigest(a), PagesDigest(std::vector<PageRef>{{5, 1}, {9, 2}}));
  EXPECT_NE(PagesDigest(a), PagesDigest(std::vector<PageRef>{{5, 1}, {9, 3}}));  // a reused page
  EXPECT_NE(PagesDigest(a), PagesDigest(std::vector<PageRef>{{9, 2}, {5, 1}}));
}

TEST(HandoffMessages, ExactBytesOfHeaderAndBody) {
  const std::vector<uint8_t> ack = AbortAck{0x0102030405060708ull}.Encode();
  // clang-format off
  const std::vector<uint8_t> want = {'T', 'D', 'H', 'O', 8, 0, 5, 0, 8, 0, 0, 0,  // header
                                     8, 7, 6, 5, 4, 3, 2, 1};                    // handoff_id
  // clang-format on
  EXPECT_EQ(ack, want);
  const std::vector<uint8_t> abort = Abort{1, AbortCode::kQueueFull, "ab"}.Encode();
  // clang-format off
  const std::vector<uint8_t> want_abort = {'T', 'D', 'H', 'O', 8, 0, 4, 0, 16, 0, 0, 0,  // header
                                           1, 0, 0, 0, 0, 0, 0, 0,  // handoff_id
                                           2, 0,                    // code: queue-full
                                           2, 0, 0, 0, 'a', 'b'};   // reason
  // clang-format on
  EXPECT_EQ(abort, want_abort);
  auto header = DecodeHeader(abort);
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->type, MessageType::kAbort);
  EXPECT_EQ(header->body_length, 16u);
}

// Every proper prefix fails: first on the header's body_length, and, with
// body_length patched to match the prefix, on the field it cuts.
template <typename M>
void ExpectEveryTruncationFails(const M& m) {
  const std::vector<uint8_t> bytes = m.Encode();
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + ptrdiff_t(n));
    EXPECT_TRUE(IsDataLoss(M::Decode(prefix).status())) << MessageTypeName(M::kType) << " n=" << n;
    if (n < kHandoffHeaderBytes) continue;
    PutU32(prefix, 8, uint32_t(n - kHandoffHeaderBytes));
    EXPECT_TRUE(IsDataLoss(M::Decode(prefix).status(), "field"))
        << MessageTypeName(M::kType) << " n=" << n;
  }
}

TEST(HandoffMessages, EveryTruncationFailsCleanly) {
  ExpectEveryTruncationFails(SampleHello());
  ExpectEveryTruncationFails(SampleDestination());
  ExpectEveryTruncationFails(SampleCommit());
  ExpectEveryTruncationFails(SampleAbort());
  ExpectEveryTruncationFails(SampleAbortAck());
}

TEST(HandoffMessages, BadHeaderFields) {
  std::vector<uint8_t> bytes = SampleHello().Encode();
  auto bad_magic = bytes;
  bad_magic[0] = 'X';
  EXPECT_TRUE(IsDataLoss(Hello::Decode(bad_magic).status(), "magic"));
  auto bad_version = bytes;
  bad_version[4] = 1;  // the version before instance ids and heartbeats
  EXPECT_TRUE(IsDataLoss(Hello::Decode(bad_version).status(), "version 1"));
  for (int type : {0, 7, 0xFFFF}) {
    auto bad_type = bytes;
    bad_type[6] = uint8_t(type);
    bad_type[7] = uint8_t(type >> 8);
    EXPECT_TRUE(IsDataLoss(PeekType(bad_type).status(), "unknown type"));
  }
  EXPECT_TRUE(IsDataLoss(Commit::Decode(bytes).status(), "expected Commit"));
  EXPECT_TRUE(IsDataLoss(AbortAck::Decode(SampleAbort().Encode()).status(), "expected AbortAck"));
}

TEST(HandoffMessages, BodyLengthMismatch) {
  const std::vector<uint8_t> bytes = SampleCommit().Encode();
  auto longer = bytes;
  longer.push_back(0);
  EXPECT_TRUE(IsDataLoss(Commit::Decode(longer).status(), "body_length"));
  PutU32(longer, 8, uint32_t(longer.size() - kHandoffHeaderBytes));
  EXPECT_TRUE(IsDataLoss(Commit::Decode(longer).status(), "trailing bytes"));
  auto claims_more = bytes;
  PutU32(claims_more, 8, uint32_t(bytes.size()));
  EXPECT_TRUE(IsDataLoss(Commit::Decode(claims_more).status(), "body_length"));
  auto huge = bytes;
  PutU32(huge, 8, 0xFFFFFFFFu);
  EXPECT_TRUE(IsDataLoss(DecodeHeader(huge).status(), "exceeds the limit"));
}

TEST(HandoffMessages, HugeCountsAreRejectedBeforeAllocating) {
  // Destination body: handoff_id, decode_instance_id, skip_tokens, then the token count.
  const size_t tokens_count_at = kHandoffHeaderBytes + 24;
  auto tokens = SampleDestination().Encode();
  PutU32(tokens, tokens_count_at, 0xFFFFFFFFu);
  EXPECT_TRUE(
      IsDataLoss(Destination::Decode(tokens).status(), "'tokens': count 4294967295 exceeds"));
  PutU32(tokens, tokens_count_at, kMaxHandoffTokens);  // within the cap, but not in the bytes
  EXPECT_TRUE(IsDataLoss(Destination::Decode(tokens).status(), "'tokens': count 16777216 needs"));

  auto pages = SampleDestination().Encode();
  PutU32(pages, tokens_count_at + 4 + 150 * 4, kMaxHandoffPages + 1);
  EXPECT_TRUE(IsDataLoss(Destination::Decode(pages).status(), "'pages'"));

  // Commit body: handoff_id, pages_digest, first_token, then the digest count.
  auto digests = SampleCommit().Encode();
  PutU32(digests, kHandoffHeaderBytes + 20, kMaxHandoffBuffers + 1);
  EXPECT_TRUE(IsDataLoss(Commit::Decode(digests).status(), "'digests': count 65 exceeds"));

  auto name = Hello{"decode", "x", "w", 1, 0}.Encode();
  PutU32(name, kHandoffHeaderBytes, kMaxHandoffStringBytes + 1);
  EXPECT_TRUE(IsDataLoss(Hello::Decode(name).status(), "'role'"));
  auto reason = SampleAbort().Encode();
  PutU32(reason, kHandoffHeaderBytes + 10, 1000);  // after handoff_id and code
  EXPECT_TRUE(IsDataLoss(Abort::Decode(reason).status(), "'reason': count 1000 needs"));
}

TEST(HandoffMessages, MeaninglessValuesAreRejected) {
  EXPECT_TRUE(IsDataLoss(Hello::Decode(Hello{"router", "f", "w", 1, 0}.Encode()).status(), "'role'"));

  Destination d = SampleDestination();
  d.skip_tokens = -1;
  EXPECT_TRUE(IsDataLoss(Destination::Decode(d.Encode()).status(), "'skip_tokens'"));
  d.skip_tokens = 151;
  EXPECT_TRUE(IsDataLoss(Destination::Decode(d.Encode()).status(), "'skip_tokens'"));
  d = SampleDestination();
  d.pages[1].page = -3;
  EXPECT_TRUE(IsDataLoss(Destination::Decode(d.Encode()).status(), "negative page -3"));
  d = SampleDestination();
  d.pages.push_back({11, 0});
  EXPECT_TRUE(
      IsDataLoss(Destination::Decode(d.Encode()).status(), "3 pages, but tokens [64, 150)"));
  d.pages.resize(1);
  EXPECT_TRUE(IsDataLoss(Destination::Decode(d.Encode()).status(), "'pages'"));
  d = SampleDestination();
  d.skip_tokens = 100;  // a partly cached page is still sent whole: pages 1 and 2
  EXPECT_TRUE(Destination::Decode(d.Encode()).ok());
}

// Random corruption either fails with DataLoss or decodes to a message that
// re-encodes to exactly the corrupted bytes (the encoding is canonical).
TEST(HandoffMessages, RandomCorruptionNeverCrashes) {
  std::mt19937_64 rng(20240611);
  int accepted = 0, rejected = 0;
  for (const std::vector<uint8_t>& original : AllSamples()) {
    for (int trial = 0; trial < 3000; ++trial) {
      std::vector<uint8_t> bytes = original;
      const int flips = 1 + int(rng() % 4);
      for (int f = 0; f < flips; ++f) {
        // Half the flips hit the header and first fields, where lengths live.
        const size_t span = (rng() & 1) ? std::min<size_t>(bytes.size(), 40) : bytes.size();
        bytes[rng() % span] ^= uint8_t(1 + rng() % 255);
      }
      if (rng() % 8 == 0) bytes.resize(rng() % (bytes.size() + 1));
      std::vector<uint8_t> reencoded;
      const Status s = DecodeAny(bytes, &reencoded);
      if (s.ok()) {
        ++accepted;
        EXPECT_EQ(reencoded, bytes);
      } else {
        ++rejected;
        EXPECT_TRUE(IsDataLoss(s));
        EXPECT_FALSE(s.message().empty());
      }
    }
  }
  EXPECT_GT(accepted, 0);
  EXPECT_GT(rejected, 0);
}

TEST(HandoffMessages, RandomGarbageNeverCrashes) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 20000; ++trial) {
    std::vector<uint8_t> bytes(rng() % 64);
    for (uint8_t& b : bytes) b = uint8_t(rng());
    if (bytes.size() >= kHandoffHeaderBytes) {  // a valid header, so the bodies get decoded
      const std::vector<uint8_t> header = AbortAck{}.Encode();
      std::copy(header.begin(), header.begin() + 6, bytes.begin());
      bytes[6] = uint8_t(1 + rng() % 5);
      bytes[7] = 0;
      PutU32(bytes, 8, uint32_t(bytes.size() - kHandoffHeaderBytes));
    }
    std::vector<uint8_t> reencoded;
    const Status s = DecodeAny(bytes, &reencoded);
    if (s.ok()) {
      EXPECT_EQ(reencoded, bytes);
    } else {
      EXPECT_TRUE(IsDataLoss(s));
    }
  }
}

}  // namespace
}  // namespace tandem
