// What `tandem bench agentic` and `tandem verify` share: exit codes, the
// host:port parser, and loading the reference model the oracle replays on.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "model/model.h"
#include "model/model_source.h"

namespace tandem::bench {

// Exit codes beyond 0 (all good) and 1 (bad usage or an error).
constexpr int kExitCorrupt = 3;  // the oracle found corrupt answers
constexpr int kExitStopped = 4;  // the health gate stopped the sweep, or the server did not recover
constexpr int kExitFailed = 5;   // rounds timed out or failed
// Nothing corrupt and nothing failed, but judged across numerics identities
// (another build, a mixed deployment, an older transcript): drift, at most.
constexpr int kExitDrift = 6;

// "host:port" or "http://host:port/"; false when it is neither.
bool SplitUrl(const std::string& url, std::string* host, int* port);
Status WriteFile(const std::string& path, const std::string& text);
// Loads the reference model and checks it is the one the server serves. A
// tandem server (it reports its attention) names the model as the reference
// does, so another name is refused. Other servers name it as they like (a
// file path, an alias): the model's name, its file's name or path with or
// without ".gguf" count as the same; anything else is judged with a warning.
StatusOr<std::unique_ptr<Model>> LoadReference(const ModelSource& opts, const std::string& served_id, bool tandem,
                                               const std::string& served_chat_format);

}  // namespace tandem::bench
