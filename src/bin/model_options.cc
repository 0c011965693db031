#include "bin/model_options.h"

#include "bin/shared_flags.h"

namespace tandem::cli {

void ModelOptions::AddTo(CLI::App* cmd, ModelSource* s) {
  cmd->add_option("-m,--model", s->model_path,
                  "GGUF model file (default: the embedded `small` model, generated on first use)");
  AddThreads(cmd, &s->threads);
  cmd->add_option("--isa", s->isa, "Force kernels: scalar, avx2 or avx512 (default: best supported)");
  cmd->add_option("--chat-template", s->chat_template_path,
                  "Jinja chat template file used instead of the model's tokenizer.chat_template "
                  "(give the server and the reference the same one)");
  cmd->add_option("--chat-date", s->chat_date,
                  "YYYY-MM-DD: the day chat templates print as today (strftime_now); a fixed day keeps prompts "
                  "reproducible (default 2024-07-26; give the server and the reference the same one)");
}

}  // namespace tandem::cli
