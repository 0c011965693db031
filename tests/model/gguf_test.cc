// GGUF reader/writer: round trips of every value and tensor type, and one
// test per kind of malformed file (clear error naming the field, no crash).
#include "model/gguf.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

#include "model/presets.h"
#include "support/process.h"

namespace tandem {
namespace {

// Hand-assembles GGUF bytes so tests can corrupt any single field.
struct Bytes {
  std::vector<uint8_t> b;
  template <typename T>
  Bytes& Put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
    return *this;
  }
  Bytes& Str(const std::string& s) {
    Put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& Header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return Put<uint32_t>(0x46554747).Put<uint32_t>(version).Put<uint64_t>(n_tensors).Put<uint64_t>(n_kv);
  }
  Bytes& PadTo(size_t align) {
    b.resize((b.size() + align - 1) / align * align, 0);
    return *this;
  }
};

Status ParseStatus(const std::vector<uint8_t>& bytes) { return GgufFile::Parse(bytes).status(); }

void ExpectRejected(const std::vector<uint8_t>& bytes, const std::string& needle) {
  Status st = ParseStatus(bytes);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
  EXPECT_NE(st.message().find(needle), std::string::npos)
      << "message '" << st.message() << "' should mention '" << needle << "'";
}

GgufWriter WriterWithEverything(uint32_t version, uint64_t alignment) {
  GgufWriter w(version, alignment);
  GgufValue v;
  v.type = GgufType::kUint8; v.u = 200; w.Set("u8", v);
  v = {}; v.type = GgufType::kInt8; v.i = -100; w.Set("i8", v);
  v = {}; v.type = GgufType::kUint16; v.u = 60000; w.Set("u16", v);
  v = {}; v.type = GgufType::kInt16; v.i = -30000; w.Set("i16", v);
  w.SetUint32("u32", 4000000000u);
  w.SetInt32("i32", -2000000000);
  w.SetUint64("u64", 1ull << 60);
  v = {}; v.type = GgufType::kInt64; v.i = -(1ll << 60); w.Set("i64", v);
  w.SetFloat32("f32", 1.5f);
  v = {}; v.type = GgufType::kFloat64; v.f = 2.25; w.Set("f64", v);
  w.SetBool("bool", true);
  w.SetString("str", "héllo");
  w.SetStringArray("strs", {"a", "", "ccc"});
  w.SetFloatArray("floats", {1, 2, 3});
  w.SetInt32Array("ints", {-1, 0, 7});
  GgufValue nested; nested.type = GgufType::kArray; nested.array_type = GgufType::kArray;
  GgufValue inner; inner.type = GgufType::kArray; inner.array_type = GgufType::kUint8;
  GgufValue e; e.type = GgufType::kUint8; e.u = 9; inner.array.push_back(e);
  nested.array.push_back(inner);
  w.Set("nested", nested);
  const std::vector<float> vals = {0.5f, -1.25f, 3.0f, 0.0f};
  std::vector<float> q8(64);
  for (size_t i = 0; i < q8.size(); ++i) q8[i] = float(i) - 30.0f;
  EXPECT_TRUE(w.AddTensor("f32", TensorType::kF32, {4}, EncodeTensor(vals, TensorType::kF32)).ok());
  EXPECT_TRUE(w.AddTensor("f16", TensorType::kF16, {2, 2}, EncodeTensor(vals, TensorType::kF16)).ok());
  EXPECT_TRUE(w.AddTensor("bf16", TensorType::kBF16, {4, 1}, EncodeTensor(vals, TensorType::kBF16)).ok());
  EXPECT_TRUE(w.AddTensor("q8", TensorType::kQ8_0, {32, 2}, EncodeTensor(q8, TensorType::kQ8_0)).ok());
  return w;
}

TEST(Gguf, RoundTripsEveryTypeInV2AndV3) {
  for (uint32_t version : {2u, 3u}) {
    for (uint64_t alignment : {32ull, 64ull}) {
      const auto bytes = WriterWithEverything(version, alignment).Serialize();
      auto g = GgufFile::Parse(bytes);
      ASSERT_TRUE(g.ok()) << g.status().ToString();
      const GgufFile& f = **g;
      EXPECT_EQ(f.version(), version);
      EXPECT_EQ(f.alignment(), alignment);
      EXPECT_EQ(f.Find("u8")->u, 200u);
      EXPECT_EQ(f.Find("i8")->i, -100);
      EXPECT_EQ(f.Find("u16")->u, 60000u);
      EXPECT_EQ(f.Find("i16")->i, -30000);
      EXPECT_EQ(*f.GetUint("u32"), 4000000000u);
      EXPECT_EQ(f.Find("i32")->i, -2000000000);
      EXPECT_EQ(*f.GetUint("u64"), 1ull << 60);
      EXPECT_EQ(f.Find("i64")->i, -(1ll << 60));
      EXPECT_EQ(*f.GetFloat("f32"), 1.5);
      EXPECT_EQ(*f.GetFloat("f64"), 2.25);
      EXPECT_TRUE(*f.GetBool("bool"));
      EXPECT_EQ(*f.GetString("str"), "héllo");
      EXPECT_EQ(*f.GetStringArray("strs"), (std::vector<std::string>{"a", "", "ccc"}));
      EXPECT_EQ(*f.GetFloatArray("floats"), (std::vector<float>{1, 2, 3}));
      EXPECT_EQ(*f.GetIntArray("ints"), (std::vector<int64_t>{-1, 0, 7}));
      EXPECT_EQ(f.Find("nested")->array.at(0).array.at(0).u, 9u);
      EXPECT_FALSE(f.GetUint("i32").ok());  // negative: not a valid uint
      EXPECT_FALSE(f.GetString("u8").ok());
      ASSERT_EQ(f.tensors().size(), 4u);
      for (const TensorInfo& t : f.tensors()) {
        EXPECT_EQ(t.offset % alignment, 0u) << t.name;
        EXPECT_EQ((t.data - bytes.data()) % alignment, 0) << t.name;
      }
      float x;
      std::memcpy(&x, f.FindTensor("f32")->data + 4, 4);
      EXPECT_EQ(x, -1.25f);
      EXPECT_EQ(f.FindTensor("q8")->n_bytes, 68u);
      EXPECT_EQ(f.FindTensor("f16")->dims, (std::vector<uint64_t>{2, 2}));
    }
  }
}

TEST(GgufMalformed, EveryTruncationIsRejected) {
  const auto bytes = WriterWithEverything(3, 32).Serialize();
  // The tensor data ends the file; any cut through header, metadata, tensor
  // infos or data must fail cleanly.
  auto full = GgufFile::Parse(bytes);
  ASSERT_TRUE(full.ok());
  const TensorInfo& last = (*full)->tensors().back();
  const size_t data_end = size_t(last.data - bytes.data()) + last.n_bytes;
  for (size_t n = 0; n < data_end; ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + long(n));
    Status st = ParseStatus(cut);
    ASSERT_FALSE(st.ok()) << "accepted a file cut to " << n << " bytes";
  }
  ExpectRejected(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 10), "header tensor_count");
  ExpectRejected(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 6), "header version");
  ExpectRejected({}, "header magic");
}

TEST(GgufMalformed, BadMagicAndVersion) {
  ExpectRejected(Bytes().Put<uint32_t>(0x12345678).Put<uint32_t>(3).b, "magic");
  ExpectRejected(Bytes().Header(0, 0, 1).b, "version 1");
  ExpectRejected(Bytes().Header(0, 0, 7).b, "version 7");
}

TEST(GgufMalformed, HugeCounts) {
  ExpectRejected(Bytes().Header(1ull << 62, 0).b, "tensor_count");
  ExpectRejected(Bytes().Header(0, 1ull << 62).b, "metadata_kv_count");
  // A string length far past the end.
  ExpectRejected(Bytes().Header(0, 1).Put<uint64_t>(1ull << 40).PadTo(64).b, "metadata key #0 length");
  // An array claiming more elements than bytes remain.
  ExpectRejected(Bytes().Header(0, 1).Str("arr").Put<uint32_t>(9).Put<uint32_t>(4)
                     .Put<uint64_t>(1ull << 61).Put<uint32_t>(0).b,
                 "metadata 'arr'");
  // A huge tensor dimension.
  ExpectRejected(Bytes().Header(1, 0).Str("t").Put<uint32_t>(2).Put<uint64_t>(1ull << 50)
                     .Put<uint64_t>(4).Put<uint32_t>(0).Put<uint64_t>(0).PadTo(32).b,
                 "tensor 't' dim 0");
  ExpectRejected(Bytes().Header(1, 0).Str("t").Put<uint32_t>(9).PadTo(96).b, "n_dims");
  ExpectRejected(Bytes().Header(1, 0).Str("t").Put<uint32_t>(0).PadTo(96).b, "n_dims");
}

TEST(GgufMalformed, OffsetsPastTheEnd) {
  // One F32 tensor of 8 elements (32 bytes) whose data lies past the file's end.
  auto make = [](uint64_t offset, size_t data_bytes) {
    Bytes b;
    b.Header(1, 0).Str("w").Put<uint32_t>(1).Put<uint64_t>(8).Put<uint32_t>(0).Put<uint64_t>(offset);
    b.PadTo(32);
    b.b.resize(b.b.size() + data_bytes, 0);
    return b.b;
  };
  EXPECT_TRUE(ParseStatus(make(0, 32)).ok());
  ExpectRejected(make(0, 31), "tensor 'w' data");
  ExpectRejected(make(64, 32), "tensor 'w' data");
  ExpectRejected(make(1ull << 63, 32), "tensor 'w'");
}

// Two tensors that share bytes would each be repacked (and each cost memory):
// a file whose tensors alias is malformed.
TEST(GgufMalformed, OverlappingTensorsAreRejected) {
  auto make = [](uint64_t second_offset) {
    Bytes b;
    b.Header(2, 0);
    b.Str("a").Put<uint32_t>(1).Put<uint64_t>(8).Put<uint32_t>(0).Put<uint64_t>(0);
    b.Str("b").Put<uint32_t>(1).Put<uint64_t>(8).Put<uint32_t>(0).Put<uint64_t>(second_offset);
    b.PadTo(32);
    b.b.resize(b.b.size() + 64, 0);
    return b.b;
  };
  EXPECT_TRUE(ParseStatus(make(32)).ok());
  ExpectRejected(make(0), "tensors 'a' and 'b' overlap");
}

TEST(GgufMalformed, UnknownTypes) {
  ExpectRejected(Bytes().Header(0, 1).Str("k").Put<uint32_t>(13).Put<uint32_t>(0).b,
                 "metadata 'k' has unknown value type 13");
  ExpectRejected(Bytes().Header(0, 1).Str("k").Put<uint32_t>(9).Put<uint32_t>(99).Put<uint64_t>(0).b,
                 "unknown array element type 99");
  // Named as ggml names them, with what is supported.
  ExpectRejected(Bytes().Header(1, 0).Str("w").Put<uint32_t>(1).Put<uint64_t>(256).Put<uint32_t>(17)
                     .Put<uint64_t>(0).PadTo(32).b,
                 "tensor 'w' has unsupported tensor type IQ2_XS (id 17); F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, "
                 "Q5_K and Q6_K are supported");
  ExpectRejected(Bytes().Header(1, 0).Str("w").Put<uint32_t>(1).Put<uint64_t>(32).Put<uint32_t>(3)
                     .Put<uint64_t>(0).PadTo(32).b,
                 "unsupported tensor type Q4_1 (id 3);");
  ExpectRejected(Bytes().Header(1, 0).Str("w").Put<uint32_t>(1).Put<uint64_t>(32).Put<uint32_t>(12345)
                     .Put<uint64_t>(0).PadTo(32).b,
                 "unsupported tensor type (id 12345);");
  // A K-quant row must be whole 256-element super-blocks.
  ExpectRejected(Bytes().Header(1, 0).Str("w").Put<uint32_t>(1).Put<uint64_t>(128).Put<uint32_t>(12)
                     .Put<uint64_t>(0).PadTo(32).b,
                 "row of 128 elements is not a multiple of the Q4_K block size");
  ExpectRejected(Bytes().Header(0, 1).Str("b").Put<uint32_t>(7).Put<uint8_t>(5).b, "bool");
}

TEST(GgufMalformed, MisalignedData) {
  Bytes b;
  b.Header(1, 0).Str("w").Put<uint32_t>(1).Put<uint64_t>(4).Put<uint32_t>(0).Put<uint64_t>(4);
  b.PadTo(32);
  b.b.resize(b.b.size() + 64, 0);
  ExpectRejected(b.b, "not aligned");
  // A non-power-of-two alignment is itself malformed.
  ExpectRejected(Bytes().Header(0, 1).Str("general.alignment").Put<uint32_t>(4).Put<uint32_t>(24).b,
                 "general.alignment");
  // Q8_0 rows must hold whole 32-element blocks.
  ExpectRejected(Bytes().Header(1, 0).Str("q").Put<uint32_t>(1).Put<uint64_t>(20).Put<uint32_t>(8)
                     .Put<uint64_t>(0).PadTo(32).b,
                 "block size");
}

TEST(GgufMalformed, DuplicatesAreRejected) {
  ExpectRejected(Bytes().Header(0, 2).Str("k").Put<uint32_t>(4).Put<uint32_t>(1)
                     .Str("k").Put<uint32_t>(4).Put<uint32_t>(2).b,
                 "appears twice");
}

TEST(GgufMalformed, RandomByteFlipsNeverCrash) {
  const auto bytes = WriterWithEverything(3, 32).Serialize();
  uint32_t s = 12345;
  int rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    auto copy = bytes;
    for (int k = 0; k < 3; ++k) {
      s = s * 1664525u + 1013904223u;
      copy[(s >> 8) % copy.size()] ^= uint8_t(1u << ((s >> 3) % 8));
    }
    rejected += !ParseStatus(copy).ok();  // must return either way, under ASan too
  }
  EXPECT_GT(rejected, 0);
}

// Writes `header` at the start of a sparse file of `size` bytes (the rest
// reads as zeros and takes no disk); false if the filesystem refuses the size.
bool WriteSparseFile(const std::string& path, const std::vector<uint8_t>& header, uint64_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  const bool ok = ::write(fd, header.data(), header.size()) == ssize_t(header.size()) &&
                  ::ftruncate(fd, off_t(size)) == 0;
  ::close(fd);
  return ok;
}

// Issue 26, "hostile files": the reader checked each declared count against
// the bytes that remain, but decoding inflates them (one byte of a uint8
// array, or eight of an empty string, becomes a 96-byte GgufValue; 32 bytes
// of a tensor info become a TensorInfo and an index entry), so a count that a
// large file can hold still asked for terabytes and std::bad_alloc ended the
// process. Here every header sits at the start of a 2 TiB sparse file, so the
// bytes checks pass; the memory limit must refuse each one, naming the field
// and its count, before anything is allocated.
TEST(Gguf, HostileArrayCountIsRefusedBeforeMemoryIsSpent) {
  constexpr uint64_t kFileBytes = 1ull << 41;
  const std::string path = testing::MakeTempDir() + "/hostile.gguf";
  if (!WriteSparseFile(path, Bytes().Header(0, 0).b, kFileBytes)) {
    GTEST_SKIP() << "the filesystem under /tmp refuses a " << kFileBytes << "-byte sparse file";
  }
  auto expect_refused = [&](const std::vector<uint8_t>& header, const std::string& needle) {
    ASSERT_TRUE(WriteSparseFile(path, header, kFileBytes));
    auto g = GgufFile::Open(path);
    ASSERT_FALSE(g.ok()) << "accepted: " << needle;
    EXPECT_EQ(g.status().code(), StatusCode::kDataLoss) << g.status().ToString();
    EXPECT_NE(g.status().message().find(needle), std::string::npos)
        << "message '" << g.status().message() << "' should mention '" << needle << "'";
  };
  const uint64_t all_bytes = kFileBytes - 64;  // about what remains after the array's header
  const uint32_t kArray = 9, kUint8 = 0, kString = 8;
  // 2^41 uint8 elements: 192 TiB of GgufValues, more than the address space.
  expect_refused(Bytes().Header(0, 1).Str("arr").Put(kArray).Put(kUint8).Put<uint64_t>(all_bytes).b,
                 "metadata 'arr' declares " + std::to_string(all_bytes) + " items");
  // 2^31 empty strings: 16 GiB on disk, 192 GiB in memory.
  expect_refused(
      Bytes().Header(0, 1).Str("strs").Put(kArray).Put(kString).Put<uint64_t>(1ull << 31).b,
      "metadata 'strs' declares 2147483648 items");
  // A string length past the end of even this file.
  expect_refused(Bytes().Header(0, 1).Put<uint64_t>(1ull << 62).b,
                 "metadata key #0 length 4611686018427387904");
  // 2^35 tensor infos (32 bytes each on disk) and 2^37 metadata entries.
  expect_refused(Bytes().Header(1ull << 35, 0).b, "header tensor_count declares 34359738368 items");
  expect_refused(Bytes().Header(0, 1ull << 37).b,
                 "header metadata_kv_count declares 137438953472 items");
  // The limit is one for the whole file: 2^22 metadata entries fit it, and
  // so would 2^22 tensor infos, or a 500 MiB key, but not both.
  expect_refused(Bytes().Header(1ull << 22, 1ull << 22).b,
                 "header tensor_count declares 4194304 items");
  expect_refused(Bytes().Header(0, 1ull << 22).Put<uint64_t>(500ull << 20).b,
                 "metadata key #0 declares 524288000 items");
  // A well-formed file is nowhere near the limit.
  EXPECT_TRUE(GgufFile::Parse(WriterWithEverything(3, 32).Serialize()).ok());
}

TEST(Gguf, OpenReportsMissingFile) {
  auto g = GgufFile::Open("/nonexistent/model.gguf");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("/nonexistent/model.gguf"), std::string::npos);
}

}  // namespace
}  // namespace tandem
