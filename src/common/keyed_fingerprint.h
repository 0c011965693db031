// A fingerprint made of named parts, "name=value;name=value;...", so that
// two unequal fingerprints can say which parts differ: the weights identity
// (model/model.h) names the metadata key an edited file changed, across the
// handshake and in the disk tier. Equality is plain string equality; the
// parts are only for the message.
//
// Names and values are escaped (%XX for '%', ';', '=' and bytes outside
// printable ASCII), so any name round-trips (a GGUF key comes from the file)
// and nothing unprintable reaches a log.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tandem {

// Appends one part; names should be unique within a fingerprint.
void AppendFingerprintPart(std::string* fingerprint, std::string_view name, std::string_view value);

// The bytes AppendFingerprintPart would add.
size_t FingerprintPartBytes(std::string_view name, std::string_view value);

// Names (unescaped) of the parts whose values differ or that only one side
// has: `a`'s order first, then the names only `b` has. A part without '=' (a
// fingerprint of another format) counts as a name with an empty value.
std::vector<std::string> DifferingParts(std::string_view a, std::string_view b);

// "llama.rope.freq_base", "x, y and z", or "a, b, c, d and 7 more": at most
// max_names names, each cut to 200 bytes (they can come from a peer or a
// file); "nothing" when the fingerprints are equal.
std::string DescribeDifferingParts(std::string_view a, std::string_view b, size_t max_names = 4);

}  // namespace tandem
