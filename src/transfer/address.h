// "host:port" addresses of the engines' transports (IPv4; "localhost" is 127.0.0.1).
#pragma once

#include <netinet/in.h>

#include <string>

#include "common/status.h"

namespace tandem::transfer {

// InvalidArgument naming what is wrong for anything but host:port with an
// IPv4 host and a port in [0, 65535].
StatusOr<sockaddr_in> ParseHostPort(const std::string& address);

}  // namespace tandem::transfer
