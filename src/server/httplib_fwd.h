// cpp-httplib's types as the headers of server/ and router/ name them,
// without including the whole library.
#pragma once

namespace httplib {
class Server;
class Request;
class Response;
}  // namespace httplib
