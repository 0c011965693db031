// GGUF (v2 and v3) reader and writer.
//
// The reader memory-maps the file and treats every byte as untrusted: each
// count, length, offset and size is checked against the bytes that remain,
// and what it would take in memory against kGgufMaxDecodedBytes, before
// anything is allocated; a malformed file is rejected with a Status naming
// the offending field.
// Tensor data is never copied; TensorInfo::data points into the mapping and
// is valid while the GgufFile lives.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/mapped_file.h"
#include "common/status.h"

namespace tandem {

enum class GgufType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5,
  kFloat32 = 6, kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11,
  kFloat64 = 12,
};

// Tensor element types (ggml numbering). Only these are accepted.
enum class TensorType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ5_0 = 6, kQ8_0 = 8, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kBF16 = 30
};

const char* TensorTypeName(TensorType t);
// The name ggml gives a type id ("IQ2_XS", "Q4_1", ...), supported or not;
// empty for ids ggml does not define.
std::string GgmlTypeName(uint32_t type);
std::string SupportedTensorTypes();  // "F32, F16, ..."
// Elements per block and bytes per block; false if the type is unknown.
bool TensorTypeBlock(uint32_t type, uint64_t* block_elems, uint64_t* block_bytes);
constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint64_t kGgufMaxDims = 4;
// The most memory GgufFile::Parse spends on a file's decoded metadata and
// tensor infos (tensor data stays in the mapping). A value takes 96 bytes, so
// a 256k-token vocabulary with its scores, types and 300k merges takes about
// 100 MB; a file that declares more is refused before anything is allocated.
constexpr uint64_t kGgufMaxDecodedBytes = 1ull << 30;
constexpr int kQ8Block = 32;        // Q8_0: 32 int8 weights share one fp16 scale
constexpr int kQ8BlockBytes = 34;

struct GgufValue {
  GgufType type = GgufType::kUint8;
  uint64_t u = 0;   // unsigned ints and bool
  int64_t i = 0;    // signed ints
  double f = 0;     // floats
  std::string s;    // string
  GgufType array_type = GgufType::kUint8;
  std::vector<GgufValue> array;
};

struct TensorInfo {
  std::string name;
  TensorType type = TensorType::kF32;
  std::vector<uint64_t> dims;  // dims[0] is the contiguous (innermost) one
  uint64_t offset = 0;         // relative to the data section
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;
  uint64_t NumElements() const;
};

class GgufFile {
 public:
  static StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses bytes owned by the caller (must outlive the GgufFile).
  static StatusOr<std::unique_ptr<GgufFile>> Parse(std::span<const uint8_t> bytes);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

  const GgufValue* Find(const std::string& key) const;
  const TensorInfo* FindTensor(const std::string& name) const;

  // Typed getters. Integer getters accept any integer type whose value fits.
  StatusOr<uint64_t> GetUint(const std::string& key) const;
  StatusOr<double> GetFloat(const std::string& key) const;
  StatusOr<std::string> GetString(const std::string& key) const;
  StatusOr<bool> GetBool(const std::string& key) const;
  StatusOr<std::vector<std::string>> GetStringArray(const std::string& key) const;
  StatusOr<std::vector<float>> GetFloatArray(const std::string& key) const;
  StatusOr<std::vector<int64_t>> GetIntArray(const std::string& key) const;
  uint64_t GetUintOr(const std::string& key, uint64_t fallback) const;
  double GetFloatOr(const std::string& key, double fallback) const;
  std::string GetStringOr(const std::string& key, const std::string& fallback) const;

 private:
  MappedFile file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue> kv_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// Builds a GGUF file in memory and writes it. Keys keep insertion order.
// The default alignment is GGUF's own (32, no general.alignment key), which
// every GGUF tool reads as it is (llama.cpp's llama-quantize mishandles 64).
class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3, uint64_t alignment = 32)
      : version_(version), alignment_(alignment) {}

  void Set(const std::string& key, GgufValue value);
  const GgufValue* Get(const std::string& key) const;  // null if not set
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  void SetUint32(const std::string& key, uint32_t v);
  void SetUint64(const std::string& key, uint64_t v);
  void SetInt32(const std::string& key, int32_t v);
  void SetFloat32(const std::string& key, float v);
  void SetBool(const std::string& key, bool v);
  void SetString(const std::string& key, const std::string& v);
  void SetStringArray(const std::string& key, const std::vector<std::string>& v);
  void SetFloatArray(const std::string& key, const std::vector<float>& v);
  void SetInt32Array(const std::string& key, const std::vector<int32_t>& v);

  // dims[0] is the contiguous dimension; data must hold exactly the tensor's bytes.
  Status AddTensor(const std::string& name, TensorType type, std::vector<uint64_t> dims,
                   std::vector<uint8_t> data);

  std::vector<uint8_t> Serialize() const;
  Status WriteFile(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    TensorType type;
    std::vector<uint64_t> dims;
    std::vector<uint8_t> data;
  };
  uint32_t version_;
  uint64_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace tandem
