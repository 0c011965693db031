#include "bin/model_options.h"

#include <fstream>
#include <sstream>

#include "kernels/cpu.h"
#include "model/presets.h"

namespace tandem::cli {

void ModelOptions::AddTo(CLI::App* cmd) {
  cmd->add_option("-m,--model", model_path,
                  "GGUF model file (default: the embedded `small` model, generated on first use)");
  cmd->add_option("-t,--threads", threads, "Worker threads")->check(CLI::Range(1, 256));
  cmd->add_option("--isa", isa, "Force kernels: scalar, avx2 or avx512 (default: best supported)");
  cmd->add_option("--chat-template", chat_template_path,
                  "Jinja chat template file used instead of the model's tokenizer.chat_template "
                  "(give the server and the reference the same one)");
}

StatusOr<std::unique_ptr<Model>> ModelOptions::Load() const {
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
  if (!chat_template_path.empty()) {
    std::ifstream in(chat_template_path, std::ios::binary);
    if (!in) return NotFound("cannot read --chat-template '" + chat_template_path + "'");
    std::stringstream source;
    source << in.rdbuf();
    auto format = ChatFormat::FromOverride(source.str());
    if (!format.ok()) return InvalidArgument("--chat-template '" + chat_template_path + "': " + format.status().message());
    options.chat_format = std::move(*format);
  }
  return Model::Load(path, options);
}

}  // namespace tandem::cli
