#include "transfer/handshake.h"

#include <random>
#include <sstream>
#include <vector>

#include "common/keyed_fingerprint.h"

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

Status CheckHello(const Hello& mine, const Hello& theirs, bool allow_mixed_numerics) {
  if (mine.role == theirs.role) {
    return FailedPrecondition("both ends of the connection are " + mine.role + " engines");
  }
  if (mine.layout_fingerprint == theirs.layout_fingerprint) {
    if (mine.weights_identity == theirs.weights_identity) {
      if (mine.numerics == theirs.numerics || allow_mixed_numerics) return Status::Ok();
      auto cut = [](const std::string& s) { return s.substr(0, 120); };  // a peer's string, in a log line
      return FailedPrecondition(
          "numerics mismatch between " + mine.role + " engine " + std::to_string(mine.instance_id) + " (" +
          cut(mine.numerics) + ") and " + theirs.role + " engine " + std::to_string(theirs.instance_id) + " (" +
          cut(theirs.numerics) + "): they differ in " + DescribeDifferingParts(mine.numerics, theirs.numerics) +
          ", so a prompt computed by one and decoded by the other equals no run of either exactly (another "
          "build's kernels); start both from the same build, or pass --allow-mixed-numerics to both during a "
          "rolling upgrade");
    }
    // The identities are keyed fingerprints (model/model.h): the message names
    // what differs ("metadata llama.rope.freq_base", "tensor data") rather
    // than printing two long strings.
    return FailedPrecondition(
        "model weights mismatch between " + mine.role + " engine " +
        std::to_string(mine.instance_id) + " and " + theirs.role + " engine " +
        std::to_string(theirs.instance_id) + ": their models differ in " +
        DescribeDifferingParts(mine.weights_identity, theirs.weights_identity) +
        "; a cache computed with one model cannot be decoded with another "
        "(start both with the same model file)");
  }
  const auto a = Parts(mine.layout_fingerprint), b = Parts(theirs.layout_fingerprint);
  std::string diff;
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string x = i < a.size() ? a[i] : "(none)", y = i < b.size() ? b[i] : "(none)";
    if (x != y) diff += (diff.empty() ? "" : ", ") + ("this " + mine.role + " engine has " + x + " where the " +
                                                     theirs.role + " engine has " + y);
  }
  return FailedPrecondition("cache layout mismatch between " + mine.role + " engine " +
                            std::to_string(mine.instance_id) + " and " + theirs.role + " engine " +
                            std::to_string(theirs.instance_id) + ": " + diff +
                            " (start both with the same model, --attention, --index-k-dtype and --kv-dtype)");
}

uint64_t NewInstanceId() {
  std::random_device rd;
  uint64_t id = 0;
  while (id == 0) id = (uint64_t(rd()) << 32) ^ uint64_t(rd());
  return id;
}

}  // namespace tandem::transfer
