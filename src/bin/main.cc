// The `tandem` command: one binary, one subcommand per role or tool.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "bin/commands.h"

namespace {

// CLI11 takes a word where a subcommand is expected and that names none as
// an extra argument (`tandem nosuch --help` printed the parent's help and
// exited 0): such a word is an error that names the commands there are.
int UnknownSubcommand(const CLI::App& app, int argc, char** argv) {
  const CLI::App* at = &app;
  std::string path = "tandem";
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.empty() || word[0] == '-') return 0;  // options: CLI11's to judge
    const auto subs = at->get_subcommands([](const CLI::App*) { return true; });
    if (subs.empty()) return 0;  // a command's own arguments
    const CLI::App* next = nullptr;
    std::string names;
    for (const CLI::App* s : subs) {
      if (s->check_name(word)) next = s;
      names += (names.empty() ? "" : ", ") + s->get_name();
    }
    if (next == nullptr) {
      std::fprintf(stderr, "%s: unknown command '%s' (the commands: %s)\n", path.c_str(), word.c_str(), names.c_str());
      return 2;
    }
    path += " " + word;
    at = next;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tandem: prefill/decode-disaggregated LLM inference server"};
  app.require_subcommand(1);
  tandem::cli::RegisterCommands(app);
  if (int code = UnknownSubcommand(app, argc, argv); code != 0) return code;
  CLI11_PARSE(app, argc, argv);
  return tandem::cli::ExitCode();
}
