#include "bin/commands.h"
namespace tandem::cli {
void RegisterMkmodel(CLI::App& app) {}
}
