#include "model/numerics.h"

#include <xxhash.h>

#include <cstdio>

#include "common/keyed_fingerprint.h"
#include "kernels/cpu.h"

namespace tandem {
namespace {

std::string Hex16(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// Each part length-prefixed, so no two different part lists hash alike.
uint64_t Digest(const NumericsIdentity& n) {
  std::string all = std::to_string(n.version);
  for (const std::string* part : {&n.kernel_variant, &n.weights, &n.attention, &n.cache, &n.chat_format}) {
    all += "|" + std::to_string(part->size()) + ":" + *part;
  }
  if (n.mixed) all += "|mixed";
  return XXH3_64bits(all.data(), all.size());
}

}  // namespace

std::string NumericsIdentity::Id() const { return "n" + std::to_string(version) + "-" + Hex16(Digest(*this)); }

nlohmann::json NumericsIdentity::ToJson() const {
  return {{"id", Id()},           {"version", version},     {"kernel_variant", kernel_variant},
          {"weights", weights},   {"attention", attention}, {"cache", cache},
          {"chat_format", chat_format}, {"mixed", mixed}};
}

StatusOr<NumericsIdentity> NumericsIdentity::FromJson(const nlohmann::json& j) {
  NumericsIdentity n;
  try {
    if (!j.at("version").is_number_integer() || j["version"].get<int64_t>() < 0 || j["version"].get<int64_t>() > 1000000) {
      return InvalidArgument("bad numerics identity: its version is not a small integer");
    }
    n.version = int(j["version"].get<int64_t>());
    n.kernel_variant = j.at("kernel_variant").get<std::string>();
    n.weights = j.at("weights").get<std::string>();
    n.attention = j.at("attention").get<std::string>();
    n.cache = j.at("cache").get<std::string>();
    n.chat_format = j.at("chat_format").get<std::string>();
    n.mixed = j.value("mixed", false);
    const std::string id = j.at("id").get<std::string>();
    if (id != n.Id()) return InvalidArgument("numerics identity " + id + " does not match its parts (" + n.Id() + ")");
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(std::string("bad numerics identity: ") + e.what());
  }
  return n;
}

std::string NumericsIdentity::Differences(const NumericsIdentity& o) const {
  std::vector<std::string> parts;
  auto differ = [&](const char* name, const std::string& a, const std::string& b) {
    if (a != b) parts.push_back(std::string(name) + " ('" + a + "' here, '" + b + "' there)");
  };
  differ("version", std::to_string(version), std::to_string(o.version));
  differ("kernel variant", kernel_variant, o.kernel_variant);
  differ("weights", weights, o.weights);
  differ("attention", attention, o.attention);
  differ("cache dtypes", cache, o.cache);
  differ("chat format", chat_format, o.chat_format);
  if (mixed != o.mixed) parts.push_back(std::string("mixed deployment (") + (mixed ? "here" : "there") + ")");
  if (parts.empty()) return "nothing";
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  }
  return out;
}

std::string NumericsIdentity::HandshakeFingerprint() const {
  std::string out;
  AppendFingerprintPart(&out, "numerics version", std::to_string(version));
  AppendFingerprintPart(&out, "kernel variant", kernel_variant);
  return out;
}

std::string HandshakeNumerics() {
  NumericsIdentity n;
  n.version = kNumericsVersion;
  n.kernel_variant = kernels::ActiveVariant();
  return n.HandshakeFingerprint();
}

NumericsIdentity ComputeNumericsIdentity(const Model& model, const CacheSpec& spec) {
  NumericsIdentity n;
  n.version = kNumericsVersion;
  n.kernel_variant = kernels::ActiveVariant();
  const std::string& weights = model.weights_identity();
  n.weights = Hex16(XXH3_64bits(weights.data(), weights.size()));
  n.attention = AttentionFingerprint(spec.attention);
  for (const CacheBufferSpec& b : spec.registry.buffers()) {
    n.cache += (n.cache.empty() ? "" : ",") + b.name + ":" + CacheDTypeName(b.dtype);
  }
  n.chat_format = model.chat_format().Identity();
  return n;
}

}  // namespace tandem
