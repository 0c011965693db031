#include "model/weight_loader.h"

#include <algorithm>
#include <atomic>
#include <system_error>
#include <thread>

#include "kernels/weight_row.h"

namespace tandem {
namespace {

std::string Shape(const std::vector<uint64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

kernels::WeightType ToWeightType(TensorType t) {
  switch (t) {
    case TensorType::kF32:
      return kernels::WeightType::kF32;
    case TensorType::kF16:
      return kernels::WeightType::kF16;
    case TensorType::kBF16:
      return kernels::WeightType::kBF16;
    case TensorType::kQ8_0:
      return kernels::WeightType::kQ8_0;
    case TensorType::kQ4_0:
      return kernels::WeightType::kQ4_0;
    case TensorType::kQ5_0:
      return kernels::WeightType::kQ5_0;
    case TensorType::kQ4_K:
      return kernels::WeightType::kQ4_K;
    case TensorType::kQ5_K:
      return kernels::WeightType::kQ5_K;
    case TensorType::kQ6_K:
      return kernels::WeightType::kQ6_K;
  }
  return kernels::WeightType::kF32;
}

}  // namespace

Status WeightLoader::Pack(kernels::WeightMatrix* m) {
  if (!pack_) return Status::Ok();
  auto p = std::make_shared<const kernels::PackedWeights>(*m, false);
  if (p->data() == nullptr) {
    if (p->size() == 0) return Status::Ok();  // not a packed type
    return ResourceExhausted("out of memory repacking a " + std::to_string(m->rows) + " x " +
                             std::to_string(m->cols) + " matrix (" + std::to_string(p->size()) +
                             " bytes)");
  }
  m->packed = p->data();
  jobs_.push_back({*m, const_cast<uint8_t*>(p->data())});
  packed_->push_back(std::move(p));
  return Status::Ok();
}

void WeightLoader::PackAll() {
  const int threads = int(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, 16));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < jobs_.size(); i = next++)
      kernels::PackRows(jobs_[i].w, 0, jobs_[i].w.rows, jobs_[i].out);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads && size_t(t) < jobs_.size(); ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // no more threads: the ones there (and this one) do the rest
    }
  }
  work();
  for (auto& t : pool) t.join();
  jobs_.clear();
}

StatusOr<const TensorInfo*> WeightLoader::Find(const std::string& name, std::vector<uint64_t> dims,
                                               bool required) {
  const TensorInfo* t = g_.FindTensor(name);
  if (!t) {
    if (!required) return static_cast<const TensorInfo*>(nullptr);
    return DataLoss("model tensor '" + name + "' is missing");
  }
  if (t->dims != dims) {
    return DataLoss("model tensor '" + name + "' has shape " + Shape(t->dims) + ", expected " +
                    Shape(dims));
  }
  return t;
}

StatusOr<kernels::WeightMatrix> WeightLoader::Matrix(const std::string& name, int64_t cols,
                                                     int64_t rows, bool pack) {
  TANDEM_ASSIGN_OR_RETURN(const TensorInfo* t, Find(name, {uint64_t(cols), uint64_t(rows)}));
  kernels::WeightMatrix m;
  m.type = ToWeightType(t->type);
  m.data = t->data;
  m.rows = rows;
  m.cols = cols;
  m.row_bytes = size_t(t->n_bytes / uint64_t(rows));
  bytes_ += int64_t(t->n_bytes);
  if (pack) TANDEM_RETURN_IF_ERROR(Pack(&m));
  return m;
}

StatusOr<std::vector<kernels::WeightMatrix>> WeightLoader::Slices(const std::string& name,
                                                                  int64_t cols, int64_t rows,
                                                                  int64_t n) {
  TANDEM_ASSIGN_OR_RETURN(const TensorInfo* t,
                          Find(name, {uint64_t(cols), uint64_t(rows), uint64_t(n)}));
  std::vector<kernels::WeightMatrix> out(static_cast<size_t>(n));
  const size_t row_bytes = size_t(t->n_bytes / uint64_t(rows * n));
  for (int64_t i = 0; i < n; ++i) {
    out[size_t(i)] = {ToWeightType(t->type), t->data + size_t(i * rows) * row_bytes, rows, cols,
                      row_bytes};
    TANDEM_RETURN_IF_ERROR(Pack(&out[size_t(i)]));
  }
  bytes_ += int64_t(t->n_bytes);
  return out;
}

StatusOr<std::vector<float>> WeightLoader::Vector(const std::string& name, int64_t n,
                                                  bool required) {
  TANDEM_ASSIGN_OR_RETURN(const TensorInfo* t, Find(name, {uint64_t(n)}, required));
  std::vector<float> v;
  if (!t) return v;
  v.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i)
    v[size_t(i)] = kernels::WeightAt(ToWeightType(t->type), t->data, i);
  return v;
}

}  // namespace tandem
