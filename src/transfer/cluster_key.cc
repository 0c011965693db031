#include "transfer/cluster_key.h"

#include <arpa/inet.h>

#include <cstring>

#include "transfer/address.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <fstream>
#include <iterator>

namespace tandem::transfer {
namespace {

void AppendPart(std::vector<uint8_t>& out, std::span<const uint8_t> part) {
  const uint64_t n = part.size();
  for (int i = 0; i < 8; ++i) out.push_back(uint8_t(n >> (8 * i)));
  out.insert(out.end(), part.begin(), part.end());
}

}  // namespace

ClusterKey ClusterKey::FromBytes(std::span<const uint8_t> bytes) {
  TANDEM_CHECK_MSG(bytes.size() >= kMinSecretBytes, "a derived key shorter than a cluster key");
  ClusterKey k;
  k.secret_.assign(bytes.begin(), bytes.end());
  return k;
}

StatusOr<ClusterKey> ClusterKey::FromSecret(std::string secret) {
  const size_t b = secret.find_first_not_of(" \t\r\n"), e = secret.find_last_not_of(" \t\r\n");
  secret = b == std::string::npos ? "" : secret.substr(b, e - b + 1);
  if (secret.size() < kMinSecretBytes) {
    return InvalidArgument("a cluster key must hold at least " + std::to_string(kMinSecretBytes) + " bytes (it has " +
                           std::to_string(secret.size()) + ")");
  }
  ClusterKey k;
  k.secret_ = std::move(secret);
  return k;
}

StatusOr<ClusterKey> ClusterKey::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read --cluster-key-file '" + path + "'");
  std::string secret((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return DataLoss("cannot read --cluster-key-file '" + path + "' to its end");
  auto key = FromSecret(std::move(secret));
  if (!key.ok()) return InvalidArgument("--cluster-key-file '" + path + "': " + key.status().message());
  return key;
}

uint64_t ClusterKey::Knock() const {
  if (!enabled()) return 0;
  const std::vector<uint8_t> mac = Prove("ucx connection knock", {});
  uint64_t knock = 0;
  std::memcpy(&knock, mac.data(), sizeof(knock));
  return knock == 0 ? 1 : knock;
}

std::vector<uint8_t> ClusterKey::Prove(std::string_view label,
                                       std::initializer_list<std::span<const uint8_t>> parts) const {
  if (!enabled()) return {};
  std::vector<uint8_t> data;
  AppendPart(data, {reinterpret_cast<const uint8_t*>(label.data()), label.size()});
  for (auto p : parts) AppendPart(data, p);
  std::vector<uint8_t> mac(32);
  size_t n = 0;
  if (EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, secret_.data(), secret_.size(), data.data(), data.size(),
                mac.data(), mac.size(), &n) == nullptr || n != mac.size()) {
    return {};  // never verifies
  }
  return mac;
}

bool ClusterKey::Verify(std::string_view label, std::initializer_list<std::span<const uint8_t>> parts,
                        std::span<const uint8_t> proof) const {
  if (!enabled()) return false;
  const std::vector<uint8_t> want = Prove(label, parts);
  return !want.empty() && proof.size() == want.size() && CRYPTO_memcmp(proof.data(), want.data(), want.size()) == 0;
}

std::vector<uint8_t> NewNonce() {
  std::vector<uint8_t> n(ClusterKey::kNonceBytes);
  if (RAND_bytes(n.data(), int(n.size())) != 1) {
    std::ifstream("/dev/urandom", std::ios::binary).read(reinterpret_cast<char*>(n.data()), std::streamsize(n.size()));
  }
  return n;
}

bool NonceMemory::Remember(std::span<const uint8_t> nonce) {
  const uint64_t h = XXH3_64bits(nonce.data(), nonce.size());
  if (!seen_.insert(h).second) return false;
  order_.push_back(h);
  if (order_.size() > kCapacity) {
    seen_.erase(order_.front());
    order_.pop_front();
  }
  return true;
}

// What a Hello's proof covers: the whole message but the proof itself (role,
// layout, weights, instance ids, nonce, target).
std::vector<uint8_t> HelloSigned(const Hello& hello) {
  Hello copy = hello;
  copy.proof.clear();
  return copy.Encode();
}

std::vector<uint8_t> SignDecodeHello(const ClusterKey& key, Hello* hello) {
  if (!key.enabled()) return {};
  hello->nonce = NewNonce();
  hello->proof = key.Prove("decode hello", {HelloSigned(*hello)});
  return hello->nonce;
}

bool AddressIsMine(std::string_view target, std::string_view mine) {
  if (mine.empty() || target == mine) return true;
  // As addresses, not text: "localhost:7000" is "127.0.0.1:7000".
  auto t = ParseHostPort(std::string(target));
  auto m = ParseHostPort(std::string(mine));
  if (!t.ok() || !m.ok() || t->sin_port != m->sin_port) return false;
  return m->sin_addr.s_addr == htonl(INADDR_ANY) || m->sin_addr.s_addr == t->sin_addr.s_addr;
}

Status CheckDecodeHello(const ClusterKey& key, const Hello& theirs, NonceMemory* seen, std::string_view my_address) {
  if (!key.enabled()) return Status::Ok();
  if (!key.Verify("decode hello", {HelloSigned(theirs)}, theirs.proof)) {
    return FailedPrecondition(theirs.proof.empty()
                                  ? "it proves no cluster key (this engine has --cluster-key-file; give the decode engine the same)"
                                  : "it does not hold this engine's cluster key (--cluster-key-file differs)");
  }
  if (!AddressIsMine(theirs.target, my_address)) {
    return FailedPrecondition("its Hello was meant for " + theirs.target.substr(0, 64) + ", not this engine (" +
                              std::string(my_address) + "): a replay");
  }
  if (seen != nullptr && !seen->Remember(theirs.nonce)) {
    return FailedPrecondition("its Hello repeats one already seen (a replay)");
  }
  return Status::Ok();
}

std::vector<uint8_t> SignPrefillHello(const ClusterKey& key, const Hello& theirs, Hello* mine) {
  if (!key.enabled()) return {};
  mine->nonce = NewNonce();
  mine->proof = key.Prove("prefill hello", {theirs.nonce, mine->nonce});
  return mine->nonce;
}

Status CheckPrefillHello(const ClusterKey& key, std::span<const uint8_t> my_nonce, const Hello& theirs) {
  if (!key.enabled() || key.Verify("prefill hello", {my_nonce, theirs.nonce}, theirs.proof)) return Status::Ok();
  return FailedPrecondition(theirs.proof.empty()
                                ? "it proved no cluster key: it has another --cluster-key-file than this engine, or "
                                  "none, or it refused our Hello (meant for another address than the one it listens "
                                  "on, say): its log says which"
                                : "it does not hold this engine's cluster key (--cluster-key-file differs)");
}

void SignDestination(const ClusterKey& key, std::span<const uint8_t> prefill_nonce, Destination* d) {
  d->auth.clear();
  if (key.enabled()) d->auth = key.Prove("destination", {prefill_nonce, d->Encode()});  // all of it
}

bool DestinationAuthentic(const ClusterKey& key, std::span<const uint8_t> prefill_nonce, const Destination& d) {
  if (!key.enabled()) return true;
  Destination unsigned_copy = d;
  unsigned_copy.auth.clear();
  return key.Verify("destination", {prefill_nonce, unsigned_copy.Encode()}, d.auth);
}

Status WriteRandomClusterKey(const std::string& path) {
  const std::vector<uint8_t> raw = NewNonce();
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (uint8_t b : raw) {
    hex += kHex[b >> 4];
    hex += kHex[b & 15];
  }
  hex += "\n";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Unavailable("cannot create the cluster key file '" + path + "'");
  const bool ok = ::write(fd, hex.data(), hex.size()) == ssize_t(hex.size());
  ::close(fd);
  return ok ? Status::Ok() : Unavailable("cannot write the cluster key file '" + path + "'");
}

Status RequireClusterKey(const std::string& key_file, bool insecure, const std::vector<std::string>& addresses,
                         const std::string& who) {
  if (!key_file.empty()) return Status::Ok();
  if (!insecure) {
    return FailedPrecondition(who + " needs --cluster-key-file: without it any process that can reach the engines "
                              "could connect as one and have cache pages written where it says. Give every engine "
                              "the same key file (16+ bytes, e.g. `head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'`), or pass "
                              "--insecure-no-cluster-key on a loopback address for a test");
  }
  for (const std::string& a : addresses) {
    auto sa = ParseHostPort(a);
    if (!sa.ok()) return sa.status();
    if ((ntohl(sa->sin_addr.s_addr) >> 24) != 127) {
      return FailedPrecondition(who + ": --insecure-no-cluster-key is refused on " + a +
                                ", which is not a loopback address: engines across hosts prove a --cluster-key-file");
    }
  }
  return Status::Ok();
}

}  // namespace tandem::transfer
