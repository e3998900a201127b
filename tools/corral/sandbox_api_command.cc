// `corral sandbox-api key NAME`: an API key for corral-sandbox-api's E2B API, signed with the cluster secret. Its
// name owns every sandbox made with it; another key's sandboxes are invisible to it. Keys need no registry: any
// replica checks one with the secret alone, and a new secret revokes them all.
#include <filesystem>
#include <iostream>
#include <string>

#include "libs/api/e2b_auth.h"
#include "libs/core/token.h"
#include "tools/corral/commands.h"
#include "tools/corral/connect_flags.h"

namespace corral::cli {
namespace {

struct KeyFlags {
  std::string name;
  std::string secret_file;
  std::string cluster_dir = ".corral";
};

int RunKey(const KeyFlags& flags) {
  std::string secret_file = flags.secret_file;
  if (secret_file.empty()) secret_file = flags.cluster_dir + "/secret";
  if (flags.secret_file.empty() && !std::filesystem::exists(secret_file)) {
    std::cerr << "corral sandbox-api key: no --secret-file and no local cluster (" << secret_file
              << "): pass the cluster's secret file, or start one with `corral up`\n";
    return 2;
  }
  auto signer = TokenSigner::FromKeyFile(secret_file);
  if (!signer.ok()) {
    std::cerr << "corral sandbox-api key: " << signer.status().message() << "\n";
    return 2;
  }
  auto key = api::E2bAuth(*std::move(signer)).MintApiKey(flags.name);
  if (!key.ok()) {
    std::cerr << "corral sandbox-api key: " << key.status().message() << "\n";
    return 2;
  }
  std::cout << *key << "\n";
  const std::string http = LocalClusterAddress(flags.cluster_dir, "sandbox-api", "http");
  if (flags.secret_file.empty() && !http.empty()) {
    std::cerr << "For the e2b SDK:\n  export E2B_API_KEY=" << *key << " E2B_API_URL=http://" << http
              << " E2B_SANDBOX_URL=http://" << http << "\n";
  }
  return 0;
}

}  // namespace

void RegisterSandboxApi(CLI::App& app, int& exit_code) {
  CLI::App* api = app.add_subcommand("sandbox-api", "keys for corral-sandbox-api's E2B API");
  api->require_subcommand(1);
  auto flags = std::make_shared<KeyFlags>();
  CLI::App* key = api->add_subcommand(
      "key", "print an API key for NAME (the owner of the sandboxes made with it), signed with the cluster secret");
  key->add_option("name", flags->name, "the key's name: 1-128 of [A-Za-z0-9_:-]")->required();
  key->add_option("--secret-file", flags->secret_file, "the cluster secret (default: the local cluster's)");
  key->add_option("--cluster-dir", flags->cluster_dir, "the local cluster's directory (corral up --dir)")
      ->capture_default_str();
  key->callback([flags, &exit_code] { exit_code = RunKey(*flags); });
}

}  // namespace corral::cli
