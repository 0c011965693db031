// libFuzzer target: the handoff wire-message decoders read untrusted bytes
// (invariant 6). Every input must decode or fail with a Status — no crash,
// no over-read (ASan), no undefined behaviour (UBSan), no huge allocation
// (-rss_limit_mb) — and whatever decodes must re-encode to exactly the same
// bytes (the encoding is canonical). Built and run by scripts/fuzz.sh, not by CI.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "transfer/messages.h"

namespace {

template <typename M>
void RoundTrip(std::span<const uint8_t> bytes) {
  auto m = M::Decode(bytes);
  if (!m.ok()) return;
  const std::vector<uint8_t> again = m->Encode();
  if (again.size() != bytes.size() || !std::equal(again.begin(), again.end(), bytes.begin())) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  const std::span<const uint8_t> bytes(data, size);
  (void)DecodeHeader(bytes);
  auto type = PeekType(bytes);
  // Every decoder sees every input: a decoder must refuse another type's frame by itself.
  RoundTrip<Hello>(bytes);
  RoundTrip<Destination>(bytes);
  RoundTrip<Commit>(bytes);
  RoundTrip<Abort>(bytes);
  RoundTrip<AbortAck>(bytes);
  RoundTrip<Heartbeat>(bytes);
  (void)type;
  return 0;
}
