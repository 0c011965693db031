#include "model/model_source.h"

#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kernels/cpu.h"
#include "model/presets.h"

namespace tandem {

StatusOr<std::unique_ptr<Model>> ModelSource::Load() const {
  if (!isa.empty()) {
    auto parsed = kernels::ParseIsa(isa);
    if (!parsed) return InvalidArgument("--isa must be scalar, avx2 or avx512, not '" + isa + "'");
    if (!kernels::IsaSupported(*parsed)) {
      return FailedPrecondition(std::string("this CPU does not support ") + isa);
    }
    kernels::SetIsa(*parsed);
  }
  std::string path = model_path;
  if (path.empty()) {
    TANDEM_ASSIGN_OR_RETURN(path, EnsureDefaultModel());
  }
  ModelLoadOptions options;
  options.pack_weights = pack_weights;
  if (!chat_template_path.empty()) {
    std::ifstream in(chat_template_path, std::ios::binary);
    std::stringstream source;
    if (in) source << in.rdbuf();
    if (!in || std::filesystem::is_directory(chat_template_path)) {
      return NotFound("cannot read --chat-template '" + chat_template_path + "'");
    }
    if (source.str().empty()) return InvalidArgument("--chat-template '" + chat_template_path + "' is empty");
    auto format = ChatFormat::FromOverride(source.str());
    if (!format.ok()) {
      return InvalidArgument("--chat-template '" + chat_template_path + "': " + format.status().message());
    }
    options.chat_format = std::move(*format);
  }
  if (!chat_date.empty()) {
    std::tm tm{};
    const char* end = strptime(chat_date.c_str(), "%Y-%m-%d", &tm);
    if (end == nullptr || *end != '\0') return InvalidArgument("--chat-date must be YYYY-MM-DD, not '" + chat_date + "'");
    options.chat_date = int64_t(timegm(&tm));
  }
  return Model::Load(path, options);
}

}  // namespace tandem
