// `tandem mkmodel`: write a deterministic random-weight llama model.
#include <cstdio>
#include <memory>

#include "bin/commands.h"
#include "bin/shared_flags.h"
#include "model/presets.h"

namespace tandem::cli {

void RegisterMkmodel(CLI::App& app) {
  struct Args {
    std::string preset = "small", type = "f32", arch = "llama", out;
    uint64_t seed = 20261129;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("mkmodel", "Write a deterministic random-weight llama GGUF model");
  AddModelPreset(cmd, &args->preset);
  cmd->add_option("--type", args->type, "Matrix type: f32, f16, bf16, q8_0, q4_0, q5_0, q4_k, q5_k, q6_k, or q4_k_m (Q4_K with Q6_K where llama.cpp puts it)");
  cmd->add_option("--seed", args->seed, "Weight seed");
  cmd->add_option("--arch", args->arch, "Architecture: llama, qwen2 or qwen3 (the dsa-* presets are always deepseek32)");
  cmd->add_option("-o,--out", args->out, "Output .gguf path")->required();
  cmd->callback([args] {
    auto preset = FindPreset(args->preset);
    auto type = ParseMatrixTypes(args->type);
    Status st = !preset.ok() ? preset.status() : !type.ok() ? type.status() : Status::Ok();
    if (st.ok()) st = WriteRandomModel(*preset, *type, args->seed, args->out, args->arch);
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", st.ToString().c_str());
      SetExitCode(1);
      return;
    }
    std::fprintf(stderr, "wrote %s (preset %s, %s)\n", args->out.c_str(), args->preset.c_str(),
                 args->type.c_str());
  });
}

}  // namespace tandem::cli
