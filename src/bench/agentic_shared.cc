#include "bench/agentic_shared.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace tandem::bench {

bool SplitUrl(const std::string& url, std::string* host, int* port) {
  std::string u = url;
  if (u.rfind("http://", 0) == 0) u = u.substr(7);
  while (!u.empty() && u.back() == '/') u.pop_back();
  const size_t colon = u.rfind(':');
  if (colon == std::string::npos) return false;
  *host = u.substr(0, colon);
  *port = std::atoi(u.c_str() + colon + 1);
  return !host->empty() && *port > 0 && *port < 65536;
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.flush();
  return out ? Status::Ok() : Unavailable("cannot write " + path);
}

StatusOr<std::unique_ptr<Model>> LoadReference(const ModelSource& opts, const std::string& served_id, bool tandem,
                                               const std::string& served_chat_format) {
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, opts.Load());
  // The prompt is rendered here again: under another template or day every
  // round would be judged against a different prompt.
  if (!served_chat_format.empty() && served_chat_format != model->chat_format().Identity()) {
    return FailedPrecondition("the server renders chats with " + served_chat_format + " but the reference with " +
                              model->chat_format().Identity() + " (" + model->chat_format().Describe() +
                              "): give this command the server's --chat-template and --chat-date");
  }
  if (served_id.empty() || model->config().name == served_id) return model;
  if (tandem) {
    return FailedPrecondition("the server serves '" + served_id + "' but the reference model is '" +
                              model->config().name + "': pass --model with the server's GGUF file, or --no-verify");
  }
  auto strip = [](std::string s) {
    if (s.size() > 5 && s.compare(s.size() - 5, 5, ".gguf") == 0) s.resize(s.size() - 5);
    return s;
  };
  const std::string path = opts.model_path, file = std::filesystem::path(path).filename().string();
  const std::string served = strip(served_id), served_file = strip(std::filesystem::path(served_id).filename().string());
  if (!path.empty() && (served == strip(path) || served_file == strip(file))) return model;
  std::fprintf(stderr,
               "warning: the server calls its model '%s'; the reference is '%s'%s%s. Judging anyway: if they are "
               "not the same weights, every round will differ (pass --model with the server's GGUF file)\n",
               served_id.c_str(), model->config().name.c_str(), path.empty() ? "" : " from ", path.c_str());
  return model;
}

}  // namespace tandem::bench
