#include "common/keyed_fingerprint.h"

#include <algorithm>
#include <map>

namespace tandem {
namespace {

bool NeedsEscape(unsigned char c) {
  return c < ' ' || c >= 0x7f || c == '%' || c == ';' || c == '=';
}

size_t EscapedBytes(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += NeedsEscape(c) ? 3 : 1;
  return n;
}

void AppendEscaped(std::string* out, std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (unsigned char c : s) {
    if (NeedsEscape(c)) {
      out->push_back('%');
      out->push_back(kHex[c >> 4]);
      out->push_back(kHex[c & 15]);
    } else {
      out->push_back(char(c));
    }
  }
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Malformed escapes (from a peer of another version) stay as they are.
std::string Unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      const int hi = HexDigit(s[i + 1]), lo = HexDigit(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(char(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

// name -> value, both still escaped, with each name's first position.
struct Parts {
  std::vector<std::string_view> order;
  std::map<std::string_view, std::string_view> values;
};

Parts Split(std::string_view fingerprint) {
  Parts p;
  while (!fingerprint.empty()) {
    const size_t end = std::min(fingerprint.find(';'), fingerprint.size());
    const std::string_view part = fingerprint.substr(0, end);
    fingerprint.remove_prefix(std::min(end + 1, fingerprint.size()));
    if (part.empty()) continue;
    const size_t eq = part.find('=');
    const std::string_view name = part.substr(0, eq),
                           value = eq == part.npos ? "" : part.substr(eq + 1);
    if (p.values.emplace(name, value).second) p.order.push_back(name);
  }
  return p;
}

}  // namespace

void AppendFingerprintPart(std::string* fingerprint, std::string_view name,
                           std::string_view value) {
  if (!fingerprint->empty()) fingerprint->push_back(';');
  AppendEscaped(fingerprint, name);
  fingerprint->push_back('=');
  AppendEscaped(fingerprint, value);
}

size_t FingerprintPartBytes(std::string_view name, std::string_view value) {
  return 2 + EscapedBytes(name) + EscapedBytes(value);
}

std::vector<std::string> DifferingParts(std::string_view a, std::string_view b) {
  const Parts pa = Split(a), pb = Split(b);
  std::vector<std::string> out;
  for (std::string_view name : pa.order) {
    auto it = pb.values.find(name);
    if (it == pb.values.end() || it->second != pa.values.at(name)) out.push_back(Unescape(name));
  }
  for (std::string_view name : pb.order) {
    if (!pa.values.count(name)) out.push_back(Unescape(name));
  }
  return out;
}

std::string DescribeDifferingParts(std::string_view a, std::string_view b, size_t max_names) {
  const std::vector<std::string> names = DifferingParts(a, b);
  if (names.empty()) return "nothing";
  const size_t shown = std::min(names.size(), std::max<size_t>(max_names, 1));
  std::string out;
  for (size_t i = 0; i < shown; ++i) {
    if (i > 0) out += (i + 1 == shown && shown == names.size()) ? " and " : ", ";
    out += names[i].substr(0, 200);
  }
  if (shown < names.size()) out += " and " + std::to_string(names.size() - shown) + " more";
  return out;
}

}  // namespace tandem
