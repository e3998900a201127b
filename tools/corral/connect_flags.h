// Flags every CLI subcommand that talks to a Corral service shares: address, credentials, TLS.
#pragma once

#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "libs/rpc/channel.h"

namespace corral::cli {

struct ConnectFlags {
  std::string address;
  std::string secret_file;  // mint the cluster token from the shared secret
  std::string token;        // or pass a token directly
  double timeout_s = 10;
  TlsConfig tls;

  // The bearer token to send: --token, else minted from --secret-file, else none (--insecure services).
  absl::StatusOr<std::string> BearerToken() const;
  ChannelOptions Channel() const;
};

// Adds `address_flag` (required; "--addr" unless the CLI names it otherwise, e.g. "--host"),
// --secret-file, --token, --timeout and --tls-* to `cmd`.
void AddConnectFlags(CLI::App* cmd, ConnectFlags& flags, const std::string& what,
                     const std::string& address_flag = "--addr");

}  // namespace corral::cli
