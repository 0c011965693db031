#include "bin/model_options.h"

#include "kernels/cpu.h"
#include "model/presets.h"

namespace tandem::cli {

void ModelOptions::AddTo(CLI::App* cmd) {
  cmd->add_option("-m,--model", model_path,
                  "GGUF model file (default: the embedded `small` model, generated on first use)");
  cmd->add_option("-t,--threads", threads, "Worker threads")->check(CLI::Range(1, 256));
  cmd->add_option("--isa", isa, "Force kernels: scalar, avx2 or avx512 (default: best supported)");
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
  return Model::Load(path);
}

}  // namespace tandem::cli
