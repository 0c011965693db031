#include "transfer/handshake.h"

#include <sstream>
#include <vector>

namespace tandem::transfer {
namespace {

std::vector<std::string> Parts(const std::string& fingerprint) {
  std::vector<std::string> out;
  std::stringstream in(fingerprint);
  std::string part;
  while (std::getline(in, part, ';')) out.push_back(part);
  return out;
}

}  // namespace

Status CheckHello(const Hello& mine, const Hello& theirs) {
  if (mine.role == theirs.role) {
    return FailedPrecondition("both ends of the connection are " + mine.role + " engines");
  }
  if (mine.layout_fingerprint == theirs.layout_fingerprint) return Status::Ok();
  const auto a = Parts(mine.layout_fingerprint), b = Parts(theirs.layout_fingerprint);
  std::string diff;
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string x = i < a.size() ? a[i] : "(none)", y = i < b.size() ? b[i] : "(none)";
    if (x != y) diff += (diff.empty() ? "" : ", ") + ("this " + mine.role + " engine has " + x + " where the " +
                                                     theirs.role + " engine has " + y);
  }
  return FailedPrecondition("cache layout mismatch between " + mine.role + " engine " +
                            std::to_string(mine.engine_id) + " and " + theirs.role + " engine " +
                            std::to_string(theirs.engine_id) + ": " + diff +
                            " (start both with the same model, --attention and --index-k-dtype)");
}

}  // namespace tandem::transfer
