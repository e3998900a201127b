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

  // Set by AddConnectFlags when the address may default to the local `corral up` cluster.
  std::string cluster_service;
  std::string cluster_dir = ".corral";

  // The bearer token to send: --token, else minted from --secret-file, else none (--insecure services).
  absl::StatusOr<std::string> BearerToken() const;
  // Fills an empty address (and secret file) from <cluster_dir>/cluster.json and <cluster_dir>/secret, as
  // `corral up` wrote them. FAILED_PRECONDITION saying which flag to pass when there is no such cluster.
  absl::Status ResolveCluster();
  ChannelOptions Channel() const;
};

// `field` ("grpc", "metrics", "http") of `service` in <cluster_dir>/cluster.json, as `corral up` wrote it; empty
// when there is no such cluster or service.
std::string LocalClusterAddress(const std::string& cluster_dir, const std::string& service, const std::string& field);

// Adds `address_flag` (required; "--addr" unless the CLI names it otherwise, e.g. "--host"),
// --secret-file, --token, --timeout and --tls-* to `cmd`. With `cluster_service` (a key of cluster.json, e.g.
// "scheduler") the address is optional and defaults to that service of the local `corral up` cluster
// (call ResolveCluster before connecting).
void AddConnectFlags(CLI::App* cmd, ConnectFlags& flags, const std::string& what,
                     const std::string& address_flag = "--addr", const std::string& cluster_service = "");

}  // namespace corral::cli
