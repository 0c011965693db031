#include "bin/access_flags.h"

namespace tandem::cli {

void AccessFlags::AddTo(CLI::App* cmd) {
  cmd->add_option("--api-key", api_key,
                  "Require 'Authorization: Bearer KEY' on /v1/ routes (visible in ps: prefer --api-key-file)");
  cmd->add_option("--api-key-file", api_key_file, "Require one of the keys in this file (one per line) on /v1/ routes");
  cmd->add_option("--cors-origin", cors_origin,
                  "Send CORS headers to this origin ('*': any); none are sent without it");
}

StatusOr<AccessPolicy> AccessFlags::Load() const { return AccessPolicy::Load(api_key, api_key_file, cors_origin); }

std::vector<std::string> AccessFlags::Args() const {
  std::vector<std::string> args;
  if (!api_key.empty()) args.insert(args.end(), {"--api-key", api_key});
  if (!api_key_file.empty()) args.insert(args.end(), {"--api-key-file", api_key_file});
  if (!cors_origin.empty()) args.insert(args.end(), {"--cors-origin", cors_origin});
  return args;
}

}  // namespace tandem::cli
