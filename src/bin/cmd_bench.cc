#include "bin/commands.h"
namespace tandem::cli {
void RegisterBench(CLI::App& app) {}
}
