#include "transfer/transport_kind.h"

#include "transfer/socket.h"
#include "transfer/ucx.h"

namespace tandem::transfer {

StatusOr<TransportKind> ParseTransportKind(const std::string& name) {
  if (name == "auto") return TransportKind::kAuto;
  if (name == "shm") return TransportKind::kShm;
  if (name == "tcp") return TransportKind::kTcp;
  return InvalidArgument("--transport must be auto, shm or tcp, not '" + name + "'");
}

const char* TransportFamily(TransportKind kind) { return kind == TransportKind::kTcp ? "tcp" : "ucx"; }

StatusOr<std::unique_ptr<Transport>> MakeTransport(TransportKind kind, uint64_t knock) {
  if (kind == TransportKind::kTcp) return std::unique_ptr<Transport>(std::make_unique<SocketTransport>());
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<UcxTransport> ucx, UcxTransport::Create(kind == TransportKind::kShm, knock));
  return std::unique_ptr<Transport>(std::move(ucx));
}

}  // namespace tandem::transfer
