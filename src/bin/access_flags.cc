#include "bin/access_flags.h"

namespace tandem::cli {

void AccessFlags::AddTo(CLI::App* cmd) {
  api_key_option = cmd->add_option("--api-key", api_key,
                  "Require 'Authorization: Bearer KEY' on /v1/ routes (visible in ps: prefer --api-key-file)");
  api_key_file_option = cmd->add_option("--api-key-file", api_key_file, "Require one of the keys in this file (one per line) on /v1/ routes");
  admin_key_file_option = cmd->add_option(
      "--admin-key-file", admin_key_file,
      "Operators' keys (one per line, none of them a client's): the only keys /admin/ routes take; without it "
      "/admin/ is closed");
  cmd->add_option("--cors-origin", cors_origin,
                  "Send CORS headers to this origin ('*': any); none are sent without it");
}

StatusOr<AccessPolicy> AccessFlags::Load() const {
  // `--api-key "$KEY"` with KEY unset must not start an open server.
  if (api_key_option != nullptr && api_key_option->count() > 0 && api_key.empty()) {
    return InvalidArgument("--api-key was given an empty key");
  }
  if (api_key_file_option != nullptr && api_key_file_option->count() > 0 && api_key_file.empty()) {
    return InvalidArgument("--api-key-file was given an empty path");
  }
  if (admin_key_file_option != nullptr && admin_key_file_option->count() > 0 && admin_key_file.empty()) {
    return InvalidArgument("--admin-key-file was given an empty path");
  }
  TANDEM_ASSIGN_OR_RETURN(AccessPolicy policy, AccessPolicy::Load(api_key, api_key_file, cors_origin));
  if (!admin_key_file.empty()) TANDEM_RETURN_IF_ERROR(policy.LoadAdminKeys(admin_key_file));
  return policy;
}

std::vector<std::string> AccessFlags::Args() const {
  std::vector<std::string> args;
  if (!api_key.empty()) args.insert(args.end(), {"--api-key", api_key});
  if (!api_key_file.empty()) args.insert(args.end(), {"--api-key-file", api_key_file});
  if (!admin_key_file.empty()) args.insert(args.end(), {"--admin-key-file", admin_key_file});
  if (!cors_origin.empty()) args.insert(args.end(), {"--cors-origin", cors_origin});
  return args;
}

}  // namespace tandem::cli
