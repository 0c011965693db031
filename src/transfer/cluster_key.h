// The secret the engines of one deployment share (--cluster-key-file), and
// the proofs built from it (HMAC-SHA256, OpenSSL). Without it any local
// process could connect to a prefill engine as a decode engine and hand it a
// remote key to write through.
//
// The handshake (transfer/messages.h, Hello and Destination):
//   decode  -> prefill  Hello{nonce_d, target, proof = MAC("decode hello", the Hello without its proof)}
//   prefill -> decode   Hello{nonce_p, proof = MAC("prefill hello", nonce_d, nonce_p)}
//   decode  -> prefill  Destination{..., auth = MAC("destination", nonce_p, the destination without auth)}
// Each side checks the other's proof at connect, so a wrong key is refused
// before any remote key is taken, and says so in both logs. The prefill side's
// nonce is fresh per connection, so a recorded destination is worthless on
// another connection; a recorded decode Hello is refused as a replay (the
// prefill engine remembers the last 65,536 it took). Without a key (both sides) nothing is proven or checked;
// a side that has one refuses a side that does not.
#pragma once

#include <cstdint>
#include <deque>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "transfer/messages.h"

namespace tandem::transfer {

class ClusterKey {
 public:
  static constexpr size_t kMinSecretBytes = 16;
  static constexpr size_t kNonceBytes = 32;

  ClusterKey() = default;  // none
  // The file's bytes, surrounding whitespace removed; at least 16 bytes.
  static StatusOr<ClusterKey> Load(const std::string& path);
  static StatusOr<ClusterKey> FromSecret(std::string secret);
  // Exactly these bytes (a derived key: nothing trimmed). REQUIRES: 16+ bytes.
  static ClusterKey FromBytes(std::span<const uint8_t> bytes);

  bool enabled() const { return !secret_.empty(); }
  // 64 bits derived from the key (never 0), 0 without one. The UCX transport
  // sends it with each connection request and its listener refuses a request
  // without it before any endpoint exists (transfer/ucx.h). It is the same
  // for every connection, so it keeps out whoever lacks the key, not whoever
  // can read the wire: the Hello still proves the key.
  uint64_t Knock() const;
  // HMAC-SHA256 over the label and each part, each length-prefixed.
  std::vector<uint8_t> Prove(std::string_view label, std::initializer_list<std::span<const uint8_t>> parts) const;
  // In constant time; false when no key is set.
  bool Verify(std::string_view label, std::initializer_list<std::span<const uint8_t>> parts,
              std::span<const uint8_t> proof) const;

 private:
  std::string secret_;
};

std::vector<uint8_t> NewNonce();  // kNonceBytes from the system's random source

// The decode Hellos' nonces a prefill engine took lately: one sent again is a
// replay. Bounded (the oldest are forgotten). Not thread-safe.
class NonceMemory {
 public:
  static constexpr size_t kCapacity = 65536;
  // False when `nonce` was seen already; remembers it otherwise.
  bool Remember(std::span<const uint8_t> nonce);

 private:
  std::unordered_set<uint64_t> seen_;
  std::deque<uint64_t> order_;
};

// The handshake's steps, one per side and message (the scheme above). Without
// a key each signs nothing and accepts everything.
// Decode side: a fresh nonce and its proof on `hello` (over the whole Hello
// but the proof: nonce, target, instance ids, layout, weights); returns the
// nonce. Set every other field first.
std::vector<uint8_t> HelloSigned(const Hello& hello);  // the bytes a Hello's proof covers
std::vector<uint8_t> SignDecodeHello(const ClusterKey& key, Hello* hello);
// Prefill side: the decode Hello proves the key over all of itself,
// was meant for `my_address` (AddressIsMine; empty: not checked), and is no
// replay (`seen` null: not checked, as the listener's gate runs before the
// engine takes the Hello and remembers its nonce).
Status CheckDecodeHello(const ClusterKey& key, const Hello& theirs, NonceMemory* seen, std::string_view my_address);
// "host:port" the decode side dialed names the engine listening at `mine`:
// the same port, and the same host unless that engine listens on every
// address (0.0.0.0), compared as IPv4 addresses. Names that are not
// addresses (the loopback transport's) must be equal. Not supported: a port
// mapped on the way (NAT, a container's published port): the decode side
// must dial the port the engine listens on.
bool AddressIsMine(std::string_view target, std::string_view mine);
// Prefill side: a fresh nonce and the proof over both on `mine`; returns the nonce.
std::vector<uint8_t> SignPrefillHello(const ClusterKey& key, const Hello& theirs, Hello* mine);
// Decode side: the prefill Hello proves the key over our nonce.
Status CheckPrefillHello(const ClusterKey& key, std::span<const uint8_t> my_nonce, const Hello& theirs);
// Decode side: the MAC of the whole destination over the prefill nonce.
void SignDestination(const ClusterKey& key, std::span<const uint8_t> prefill_nonce, Destination* d);
// Prefill side: false when the destination is not authenticated for this connection.
bool DestinationAuthentic(const ClusterKey& key, std::span<const uint8_t> prefill_nonce, const Destination& d);

// Engines are authenticated by default (invariant 7). OK when a key file is
// given; without one only when `insecure` (--insecure-no-cluster-key) and
// every address the engine listens on or dials is a loopback one (127.0.0.0/8):
// otherwise FailedPrecondition saying what to do. `who`: "tandem prefill", ...
Status RequireClusterKey(const std::string& key_file, bool insecure, const std::vector<std::string>& addresses,
                         const std::string& who);

// Writes a fresh random key (64 hex characters) to `path`, readable only by
// its owner (serve --disagg's engines, when no key file is given).
Status WriteRandomClusterKey(const std::string& path);

}  // namespace tandem::transfer
