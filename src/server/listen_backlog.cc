#include "server/listen_backlog.h"
#include "common/env.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <httplib.h>

#include <cstdlib>

namespace tandem {

bool RaiseListenBacklog(int port) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return false;
  bool found = false;
  while (dirent* e = readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2) continue;
    int listening = 0;
    socklen_t len = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage addr{};
    socklen_t alen = sizeof(addr);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0) continue;
    int bound = -1;
    if (addr.ss_family == AF_INET) bound = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6) bound = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    if (bound == port && listen(fd, SOMAXCONN) == 0) found = true;
  }
  closedir(dir);
  return found;
}

bool StartListening(httplib::Server& server, std::thread* listener, std::chrono::milliseconds deadline) {
  *listener = std::thread([&server] { server.listen_after_bind(); });
  const auto until = Env::Default().Now() + deadline;
  while (!server.is_running()) {
    if (Env::Default().Now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace tandem
