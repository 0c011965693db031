#include "model/gguf.h"

#include <algorithm>

#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

namespace tandem {
namespace {

constexpr int kMaxArrayDepth = 4;
constexpr uint64_t kMaxStringBytes = 1ull << 30;
// What a std::map node adds to its value (three links and a colour), charged
// for every metadata entry and every tensor name in the index.
constexpr uint64_t kMapNodeBytes = 32;

// Reads little-endian values from untrusted bytes; every read is bounds-checked,
// and every allocation a declared count or length asks for is first charged
// against kGgufMaxDecodedBytes (Charge).
class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> b) : b_(b) {}
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return b_.size() - pos_; }

  // Reserves `count` decoded items of `each` bytes for `field` before the
  // caller allocates them. The bytes check alone is not enough: one byte of a
  // uint8 array decodes into a whole GgufValue, so a count that a large (or
  // sparse) file can hold may still ask for terabytes.
  Status Charge(uint64_t count, uint64_t each, const std::string& field) {
    const uint64_t left = kGgufMaxDecodedBytes - charged_;
    if (count > left / each) {
      return DataLoss("GGUF " + field + " declares " + std::to_string(count) + " items of " +
                      std::to_string(each) + " bytes once decoded; only " + std::to_string(left) +
                      " bytes remain of the " + std::to_string(kGgufMaxDecodedBytes) +
                      "-byte limit on a file's metadata and tensor infos");
    }
    charged_ += count * each;
    return Status::Ok();
  }

  template <typename T>
  Status Read(T* out, const std::string& field) {
    if (remaining() < sizeof(T)) {
      return DataLoss("GGUF truncated while reading " + field + " at byte " +
                      std::to_string(pos_) + " (file is " + std::to_string(b_.size()) +
                      " bytes)");
    }
    std::memcpy(out, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }

  Status ReadString(std::string* out, const std::string& field) {
    uint64_t len = 0;
    TANDEM_RETURN_IF_ERROR(Read(&len, field + " length"));
    if (len > remaining() || len > kMaxStringBytes) {
      return DataLoss("GGUF " + field + " length " + std::to_string(len) + " at byte " +
                      std::to_string(pos_ - 8) + " exceeds the " +
                      std::to_string(remaining()) + " bytes that remain");
    }
    TANDEM_RETURN_IF_ERROR(Charge(len, 1, field));
    out->assign(reinterpret_cast<const char*>(b_.data() + pos_), len);
    pos_ += len;
    return Status::Ok();
  }

 private:
  std::span<const uint8_t> b_;
  uint64_t pos_ = 0;
  uint64_t charged_ = 0;  // bytes reserved so far; never above kGgufMaxDecodedBytes
};

// Smallest encoded size of one value of a type, used to bound array counts.
uint64_t MinEncodedSize(GgufType t) {
  switch (t) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kBool: return 1;
    case GgufType::kUint16: case GgufType::kInt16: return 2;
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kFloat32: return 4;
    case GgufType::kUint64: case GgufType::kInt64: case GgufType::kFloat64: return 8;
    case GgufType::kString: return 8;
    case GgufType::kArray: return 12;
  }
  return 1;
}

bool KnownType(uint32_t t) { return t <= uint32_t(GgufType::kFloat64); }

Status ReadValue(Cursor& c, GgufType type, GgufValue* v, const std::string& field, int depth) {
  v->type = type;
  switch (type) {
    case GgufType::kUint8: { uint8_t x; TANDEM_RETURN_IF_ERROR(c.Read(&x, field)); v->u = x; v->i = x; return Status::Ok(); }
    case GgufType::kInt8: { int8_t x; TANDEM_RETURN_IF_ERROR(c.Read(&x, field)); v->i = x; v->u = uint64_t(x); return Status::Ok(); }
    case GgufType::kUint16: { uint16_t x; TANDEM_RETURN_IF_ERROR(c.Read(&x, field)); v->u = x; v->i = x; return Status::Ok(); }
    case GgufType::kInt16: { int16_t x; TANDEM_RETURN_IF_ERROR(c.Read(&x, field)); v->i = x; v->u = uint64_t(x); return Status::Ok(); }
    case GgufType::kUint32: { uint32_t x; TANDEM_RETURN_IF_ERROR(c.Read(&x, field)); v->u = x; v->i = x; return Status::Ok(); }
    case GgufType::kInt32: { int32_t x; TANDEM_RETURN_IF_ERROR(c.Read(&x, field)); v->i = x; v->u = uint64_t(x); return Status::Ok(); }
    case GgufType::kUint64: { uint64_t x; TANDEM_RETURN_IF_ERROR(c.Read(&x, field)); v->u = x; v->i = int64_t(x); return Status::Ok(); }
    case GgufType::kInt64: { int64_t x; TANDEM_RETURN_IF_ERROR(c.Read(&x, field)); v->i = x; v->u = uint64_t(x); return Status::Ok(); }
    case GgufType::kFloat32: { float x; TANDEM_RETURN_IF_ERROR(c.Read(&x, field)); v->f = x; return Status::Ok(); }
    case GgufType::kFloat64: { double x; TANDEM_RETURN_IF_ERROR(c.Read(&x, field)); v->f = x; return Status::Ok(); }
    case GgufType::kBool: {
      uint8_t x;
      TANDEM_RETURN_IF_ERROR(c.Read(&x, field));
      if (x > 1) return DataLoss("GGUF " + field + " is a bool with value " + std::to_string(x));
      v->u = x;
      return Status::Ok();
    }
    case GgufType::kString: return c.ReadString(&v->s, field);
    case GgufType::kArray: {
      if (depth >= kMaxArrayDepth) return DataLoss("GGUF " + field + " nests arrays too deeply");
      uint32_t elem_type = 0;
      uint64_t count = 0;
      TANDEM_RETURN_IF_ERROR(c.Read(&elem_type, field + " element type"));
      if (!KnownType(elem_type)) {
        return DataLoss("GGUF " + field + " has unknown array element type " +
                        std::to_string(elem_type));
      }
      TANDEM_RETURN_IF_ERROR(c.Read(&count, field + " element count"));
      v->array_type = GgufType(elem_type);
      if (count > c.remaining() / MinEncodedSize(v->array_type)) {
        return DataLoss("GGUF " + field + " claims " + std::to_string(count) +
                        " elements but only " + std::to_string(c.remaining()) +
                        " bytes remain");
      }
      TANDEM_RETURN_IF_ERROR(c.Charge(count, sizeof(GgufValue), field));
      v->array.resize(count);
      for (uint64_t k = 0; k < count; ++k) {
        TANDEM_RETURN_IF_ERROR(ReadValue(c, v->array_type, &v->array[k],
                                         field + "[" + std::to_string(k) + "]", depth + 1));
      }
      return Status::Ok();
    }
  }
  return DataLoss("GGUF " + field + " has unknown value type");
}

}  // namespace

uint64_t TensorInfo::NumElements() const {
  uint64_t n = 1;
  for (uint64_t d : dims) n *= d;
  return n;
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  TANDEM_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  auto parsed = Parse(file.bytes());
  if (!parsed.ok()) {
    return Status(parsed.status().code(), "'" + path + "': " + parsed.status().message());
  }
  std::unique_ptr<GgufFile> g = std::move(parsed).value();
  g->file_ = std::move(file);  // the mapping does not move in memory
  return g;
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(std::span<const uint8_t> bytes) {
  auto g = std::make_unique<GgufFile>();
  Cursor c(bytes);
  uint32_t magic = 0;
  TANDEM_RETURN_IF_ERROR(c.Read(&magic, "header magic"));
  if (magic != kGgufMagic) return DataLoss("not a GGUF file: header magic is wrong");
  TANDEM_RETURN_IF_ERROR(c.Read(&g->version_, "header version"));
  if (g->version_ != 2 && g->version_ != 3) {
    return DataLoss("unsupported GGUF version " + std::to_string(g->version_) +
                    " (header version; 2 and 3 are supported)");
  }
  uint64_t n_tensors = 0, n_kv = 0;
  TANDEM_RETURN_IF_ERROR(c.Read(&n_tensors, "header tensor_count"));
  TANDEM_RETURN_IF_ERROR(c.Read(&n_kv, "header metadata_kv_count"));
  // Each kv takes at least 8 (key len) + 4 (type) + 1 bytes; each tensor info at least 8+4+8+4+8.
  if (n_kv > c.remaining() / 13) {
    return DataLoss("GGUF header metadata_kv_count " + std::to_string(n_kv) +
                    " cannot fit in a " + std::to_string(bytes.size()) + "-byte file");
  }
  if (n_tensors > c.remaining() / 32) {
    return DataLoss("GGUF header tensor_count " + std::to_string(n_tensors) +
                    " cannot fit in a " + std::to_string(bytes.size()) + "-byte file");
  }
  TANDEM_RETURN_IF_ERROR(c.Charge(n_kv,
                                  sizeof(std::pair<const std::string, GgufValue>) + kMapNodeBytes,
                                  "header metadata_kv_count"));
  // A tensor info, its dims and its entry in the name index.
  TANDEM_RETURN_IF_ERROR(c.Charge(n_tensors,
                                  sizeof(TensorInfo) + kGgufMaxDims * sizeof(uint64_t) +
                                      sizeof(std::pair<const std::string, size_t>) + kMapNodeBytes,
                                  "header tensor_count"));
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key;
    const std::string field = "metadata key #" + std::to_string(k);
    TANDEM_RETURN_IF_ERROR(c.ReadString(&key, field));
    uint32_t type = 0;
    TANDEM_RETURN_IF_ERROR(c.Read(&type, "type of metadata '" + key + "'"));
    if (!KnownType(type)) {
      return DataLoss("GGUF metadata '" + key + "' has unknown value type " +
                      std::to_string(type));
    }
    GgufValue v;
    TANDEM_RETURN_IF_ERROR(ReadValue(c, GgufType(type), &v, "metadata '" + key + "'", 0));
    if (!g->kv_.emplace(key, std::move(v)).second) {
      return DataLoss("GGUF metadata key '" + key + "' appears twice");
    }
  }
  if (const GgufValue* a = g->Find("general.alignment")) {
    if (a->type != GgufType::kUint32 || a->u == 0 || (a->u & (a->u - 1)) != 0) {
      return DataLoss("GGUF metadata 'general.alignment' must be a power-of-two uint32");
    }
    g->alignment_ = a->u;
  }
  g->tensors_.resize(n_tensors);
  for (uint64_t k = 0; k < n_tensors; ++k) {
    TensorInfo& t = g->tensors_[k];
    const std::string field = "tensor #" + std::to_string(k);
    TANDEM_RETURN_IF_ERROR(c.ReadString(&t.name, field + " name"));
    const std::string tf = "tensor '" + t.name + "'";
    uint32_t n_dims = 0;
    TANDEM_RETURN_IF_ERROR(c.Read(&n_dims, tf + " n_dims"));
    if (n_dims == 0 || n_dims > kGgufMaxDims) {
      return DataLoss("GGUF " + tf + " has n_dims " + std::to_string(n_dims) + " (1 to 4 allowed)");
    }
    t.dims.resize(n_dims);
    uint64_t elems = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      TANDEM_RETURN_IF_ERROR(c.Read(&t.dims[d], tf + " dim " + std::to_string(d)));
      if (t.dims[d] == 0 || t.dims[d] > (1ull << 40) ||
          elems > std::numeric_limits<uint64_t>::max() / t.dims[d]) {
        return DataLoss("GGUF " + tf + " dim " + std::to_string(d) + " = " +
                        std::to_string(t.dims[d]) + " is out of range");
      }
      elems *= t.dims[d];
    }
    uint32_t type = 0;
    TANDEM_RETURN_IF_ERROR(c.Read(&type, tf + " type"));
    uint64_t block_elems = 0, block_bytes = 0;
    if (!TensorTypeBlock(type, &block_elems, &block_bytes)) {
      const std::string name = GgmlTypeName(type);
      return DataLoss("GGUF " + tf + " has unsupported tensor type " +
                      (name.empty() ? "" : name + " ") + "(id " + std::to_string(type) + "); " +
                      SupportedTensorTypes() + " are supported");
    }
    t.type = TensorType(type);
    if (t.dims[0] % block_elems != 0) {
      return DataLoss("GGUF " + tf + " row of " + std::to_string(t.dims[0]) +
                      " elements is not a multiple of the " + TensorTypeName(t.type) +
                      " block size");
    }
    if (elems / block_elems > (1ull << 50) / block_bytes) {
      return DataLoss("GGUF " + tf + " is too large");
    }
    t.n_bytes = elems / block_elems * block_bytes;
    TANDEM_RETURN_IF_ERROR(c.Read(&t.offset, tf + " offset"));
    if (t.offset % g->alignment_ != 0) {
      return DataLoss("GGUF " + tf + " offset " + std::to_string(t.offset) +
                      " is not aligned to " + std::to_string(g->alignment_));
    }
    if (!g->tensor_index_.emplace(t.name, k).second) {
      return DataLoss("GGUF tensor name '" + t.name + "' appears twice");
    }
  }
  const uint64_t data_start = (c.pos() + g->alignment_ - 1) / g->alignment_ * g->alignment_;
  if (data_start > bytes.size() && n_tensors > 0) {
    return DataLoss("GGUF data section starts past the end of the file");
  }
  const uint64_t data_size = data_start <= bytes.size() ? bytes.size() - data_start : 0;
  for (TensorInfo& t : g->tensors_) {
    if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
      return DataLoss("GGUF tensor '" + t.name + "' data [" + std::to_string(t.offset) + ", +" +
                      std::to_string(t.n_bytes) + ") runs past the end of the " +
                      std::to_string(data_size) + "-byte data section");
    }
    t.data = bytes.data() + data_start + t.offset;
  }
  // No two tensors share bytes: each is read (and repacked, kernels/quant_pack.h)
  // on its own, so aliases would multiply what a small file costs.
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(g->tensors_.size());
  for (const TensorInfo& t : g->tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& a = *by_offset[i - 1];
    const TensorInfo& b = *by_offset[i];
    if (b.offset < a.offset + a.n_bytes) {
      return DataLoss("GGUF tensors '" + a.name + "' and '" + b.name + "' overlap in the data section (at " +
                      std::to_string(b.offset) + ")");
    }
  }
  return g;
}

const GgufValue* GgufFile::Find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const TensorInfo* GgufFile::FindTensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {
bool IsInt(GgufType t) {
  return t == GgufType::kUint8 || t == GgufType::kInt8 || t == GgufType::kUint16 ||
         t == GgufType::kInt16 || t == GgufType::kUint32 || t == GgufType::kInt32 ||
         t == GgufType::kUint64 || t == GgufType::kInt64;
}
bool IsSigned(GgufType t) {
  return t == GgufType::kInt8 || t == GgufType::kInt16 || t == GgufType::kInt32 ||
         t == GgufType::kInt64;
}
}  // namespace

StatusOr<uint64_t> GgufFile::GetUint(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (!v) return NotFound("GGUF metadata '" + key + "' is missing");
  if (!IsInt(v->type)) return DataLoss("GGUF metadata '" + key + "' is not an integer");
  if (IsSigned(v->type) && v->i < 0) return DataLoss("GGUF metadata '" + key + "' is negative");
  return v->u;
}

StatusOr<double> GgufFile::GetFloat(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (!v) return NotFound("GGUF metadata '" + key + "' is missing");
  if (v->type == GgufType::kFloat32 || v->type == GgufType::kFloat64) return v->f;
  if (IsInt(v->type)) return IsSigned(v->type) ? double(v->i) : double(v->u);
  return DataLoss("GGUF metadata '" + key + "' is not a number");
}

StatusOr<std::string> GgufFile::GetString(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (!v) return NotFound("GGUF metadata '" + key + "' is missing");
  if (v->type != GgufType::kString) return DataLoss("GGUF metadata '" + key + "' is not a string");
  return v->s;
}

StatusOr<bool> GgufFile::GetBool(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (!v) return NotFound("GGUF metadata '" + key + "' is missing");
  if (v->type != GgufType::kBool) return DataLoss("GGUF metadata '" + key + "' is not a bool");
  return v->u != 0;
}

StatusOr<std::vector<std::string>> GgufFile::GetStringArray(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (!v) return NotFound("GGUF metadata '" + key + "' is missing");
  if (v->type != GgufType::kArray || v->array_type != GgufType::kString) {
    return DataLoss("GGUF metadata '" + key + "' is not an array of strings");
  }
  std::vector<std::string> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) out.push_back(e.s);
  return out;
}

StatusOr<std::vector<float>> GgufFile::GetFloatArray(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (!v) return NotFound("GGUF metadata '" + key + "' is missing");
  if (v->type != GgufType::kArray ||
      (v->array_type != GgufType::kFloat32 && v->array_type != GgufType::kFloat64)) {
    return DataLoss("GGUF metadata '" + key + "' is not an array of floats");
  }
  std::vector<float> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) out.push_back(float(e.f));
  return out;
}

StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (!v) return NotFound("GGUF metadata '" + key + "' is missing");
  if (v->type != GgufType::kArray || !IsInt(v->array_type)) {
    return DataLoss("GGUF metadata '" + key + "' is not an array of integers");
  }
  std::vector<int64_t> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) out.push_back(e.i);
  return out;
}

uint64_t GgufFile::GetUintOr(const std::string& key, uint64_t fallback) const {
  auto r = GetUint(key);
  return r.ok() ? *r : fallback;
}
double GgufFile::GetFloatOr(const std::string& key, double fallback) const {
  auto r = GetFloat(key);
  return r.ok() ? *r : fallback;
}
std::string GgufFile::GetStringOr(const std::string& key, const std::string& fallback) const {
  auto r = GetString(key);
  return r.ok() ? *r : fallback;
}

}  // namespace tandem
