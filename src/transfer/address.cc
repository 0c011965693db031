#include "transfer/address.h"

#include <arpa/inet.h>

#include <cstdlib>

namespace tandem::transfer {

StatusOr<sockaddr_in> ParseHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return InvalidArgument("address must be host:port, not '" + address + "'");
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  const std::string host = address.substr(0, colon) == "localhost" ? "127.0.0.1" : address.substr(0, colon);
  if (inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) return InvalidArgument("bad IPv4 address '" + host + "'");
  const std::string port_text = address.substr(colon + 1);
  char* end = nullptr;
  const long port = std::strtol(port_text.c_str(), &end, 10);
  if (port_text.empty() || *end != '\0' || port < 0 || port > 65535) {
    return InvalidArgument("bad port in '" + address + "'");
  }
  sa.sin_port = htons(uint16_t(port));
  return sa;
}

}  // namespace tandem::transfer
