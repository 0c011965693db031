// GgufWriter: builds GGUF files (tests, mkmodel, the embedded default model).
#include <cstdio>
#include <cstring>

#include "model/gguf.h"

namespace tandem {

void GgufWriter::Set(const std::string& key, GgufValue value) {
  for (auto& [k, v] : kv_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  kv_.emplace_back(key, std::move(value));
}

const GgufValue* GgufWriter::Get(const std::string& key) const {
  for (const auto& [k, v] : kv_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void GgufWriter::SetUint32(const std::string& key, uint32_t v) {
  GgufValue g; g.type = GgufType::kUint32; g.u = v; g.i = v; Set(key, std::move(g));
}
void GgufWriter::SetUint64(const std::string& key, uint64_t v) {
  GgufValue g; g.type = GgufType::kUint64; g.u = v; g.i = int64_t(v); Set(key, std::move(g));
}
void GgufWriter::SetInt32(const std::string& key, int32_t v) {
  GgufValue g; g.type = GgufType::kInt32; g.i = v; g.u = uint64_t(v); Set(key, std::move(g));
}
void GgufWriter::SetFloat32(const std::string& key, float v) {
  GgufValue g; g.type = GgufType::kFloat32; g.f = v; Set(key, std::move(g));
}
void GgufWriter::SetBool(const std::string& key, bool v) {
  GgufValue g; g.type = GgufType::kBool; g.u = v; Set(key, std::move(g));
}
void GgufWriter::SetString(const std::string& key, const std::string& v) {
  GgufValue g; g.type = GgufType::kString; g.s = v; Set(key, std::move(g));
}
void GgufWriter::SetStringArray(const std::string& key, const std::vector<std::string>& v) {
  GgufValue g; g.type = GgufType::kArray; g.array_type = GgufType::kString;
  for (const auto& s : v) { GgufValue e; e.type = GgufType::kString; e.s = s; g.array.push_back(std::move(e)); }
  Set(key, std::move(g));
}
void GgufWriter::SetFloatArray(const std::string& key, const std::vector<float>& v) {
  GgufValue g; g.type = GgufType::kArray; g.array_type = GgufType::kFloat32;
  for (float f : v) { GgufValue e; e.type = GgufType::kFloat32; e.f = f; g.array.push_back(e); }
  Set(key, std::move(g));
}
void GgufWriter::SetInt32Array(const std::string& key, const std::vector<int32_t>& v) {
  GgufValue g; g.type = GgufType::kArray; g.array_type = GgufType::kInt32;
  for (int32_t x : v) { GgufValue e; e.type = GgufType::kInt32; e.i = x; e.u = uint64_t(x); g.array.push_back(e); }
  Set(key, std::move(g));
}

Status GgufWriter::AddTensor(const std::string& name, TensorType type, std::vector<uint64_t> dims,
                             std::vector<uint8_t> data) {
  uint64_t be = 0, bb = 0;
  if (!TensorTypeBlock(uint32_t(type), &be, &bb)) return InvalidArgument("unknown tensor type");
  if (dims.empty() || dims.size() > kGgufMaxDims) return InvalidArgument("tensor '" + name + "': bad n_dims");
  uint64_t elems = 1;
  for (uint64_t d : dims) elems *= d;
  if (dims[0] % be != 0 || elems / be * bb != data.size()) {
    return InvalidArgument("tensor '" + name + "': data size does not match dims and type");
  }
  for (const auto& t : tensors_) {
    if (t.name == name) return InvalidArgument("tensor '" + name + "' added twice");
  }
  tensors_.push_back({name, type, std::move(dims), std::move(data)});
  return Status::Ok();
}

namespace {
template <typename T>
void Put(std::vector<uint8_t>& out, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}
void PutString(std::vector<uint8_t>& out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}
void PutValue(std::vector<uint8_t>& out, const GgufValue& v) {
  switch (v.type) {
    case GgufType::kUint8: Put<uint8_t>(out, uint8_t(v.u)); break;
    case GgufType::kInt8: Put<int8_t>(out, int8_t(v.i)); break;
    case GgufType::kUint16: Put<uint16_t>(out, uint16_t(v.u)); break;
    case GgufType::kInt16: Put<int16_t>(out, int16_t(v.i)); break;
    case GgufType::kUint32: Put<uint32_t>(out, uint32_t(v.u)); break;
    case GgufType::kInt32: Put<int32_t>(out, int32_t(v.i)); break;
    case GgufType::kUint64: Put<uint64_t>(out, v.u); break;
    case GgufType::kInt64: Put<int64_t>(out, v.i); break;
    case GgufType::kFloat32: Put<float>(out, float(v.f)); break;
    case GgufType::kFloat64: Put<double>(out, v.f); break;
    case GgufType::kBool: Put<uint8_t>(out, v.u ? 1 : 0); break;
    case GgufType::kString: PutString(out, v.s); break;
    case GgufType::kArray:
      Put<uint32_t>(out, uint32_t(v.array_type));
      Put<uint64_t>(out, v.array.size());
      for (const GgufValue& e : v.array) PutValue(out, e);
      break;
  }
}
}  // namespace

std::vector<uint8_t> GgufWriter::Serialize() const {
  std::vector<uint8_t> out;
  Put<uint32_t>(out, kGgufMagic);
  Put<uint32_t>(out, version_);
  Put<uint64_t>(out, tensors_.size());
  const bool write_alignment = alignment_ != 32;
  Put<uint64_t>(out, kv_.size() + (write_alignment ? 1 : 0));
  for (const auto& [k, v] : kv_) {
    PutString(out, k);
    Put<uint32_t>(out, uint32_t(v.type));
    PutValue(out, v);
  }
  if (write_alignment) {
    PutString(out, "general.alignment");
    Put<uint32_t>(out, uint32_t(GgufType::kUint32));
    Put<uint32_t>(out, uint32_t(alignment_));
  }
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const auto& t : tensors_) {
    PutString(out, t.name);
    Put<uint32_t>(out, uint32_t(t.dims.size()));
    for (uint64_t d : t.dims) Put<uint64_t>(out, d);
    Put<uint32_t>(out, uint32_t(t.type));
    Put<uint64_t>(out, offset);
    offsets.push_back(offset);
    offset += (t.data.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  out.resize((out.size() + alignment_ - 1) / alignment_ * alignment_, 0);
  const size_t data_start = out.size();
  out.resize(data_start + offset, 0);
  for (size_t k = 0; k < tensors_.size(); ++k) {
    std::memcpy(out.data() + data_start + offsets[k], tensors_[k].data.data(),
                tensors_[k].data.size());
  }
  return out;
}

Status GgufWriter::WriteFile(const std::string& path) const {
  const std::vector<uint8_t> bytes = Serialize();
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return Unavailable("cannot create '" + tmp + "'");
  const size_t written = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const bool closed = std::fclose(f) == 0;
  if (written != bytes.size() || !closed) {
    std::remove(tmp.c_str());
    return Unavailable("short write to '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Unavailable("cannot rename '" + tmp + "' to '" + path + "'");
  }
  return Status::Ok();
}

}  // namespace tandem
