// Small text helpers of the report writers (report.cc, report_svg.cc).
#pragma once

#include <cstdio>
#include <string>

namespace tandem::report_text {

// printf into a std::string (up to 255 characters).
template <typename... Args>
std::string Fmt(const char* f, Args... args) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), f, args...);
  return buf;
}

// Text safe inside XML (SVG) elements and attributes.
inline std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default:
        // XML 1.0 has no other control characters.
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n' || c == '\r') out += c;
    }
  }
  return out;
}

}  // namespace tandem::report_text
