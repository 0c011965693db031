#include "bin/commands.h"
namespace tandem::cli {
void RegisterGenerate(CLI::App& app) {}
}
