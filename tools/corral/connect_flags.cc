#include "tools/corral/connect_flags.h"

#include "libs/core/token.h"
#include "libs/rpc/auth.h"

namespace corral::cli {

absl::StatusOr<std::string> ConnectFlags::BearerToken() const {
  if (!token.empty()) return token;
  if (secret_file.empty()) return std::string();
  auto signer = TokenSigner::FromKeyFile(secret_file);
  if (!signer.ok()) return signer.status();
  return MintClusterToken(*signer);
}

ChannelOptions ConnectFlags::Channel() const {
  ChannelOptions options;
  options.tls = tls;
  return options;
}

void AddConnectFlags(CLI::App* cmd, ConnectFlags& flags, const std::string& what, const std::string& address_flag) {
  cmd->add_option(address_flag, flags.address, "HOST:PORT of the " + what)->required();
  cmd->add_option("--secret-file", flags.secret_file, "cluster secret file, to authenticate (not needed for --insecure services)");
  cmd->add_option("--token", flags.token, "bearer token to send instead of minting one from --secret-file");
  cmd->add_option("--rpc-timeout", flags.timeout_s, "seconds to wait for each RPC")->capture_default_str();
  cmd->add_option("--tls-ca", flags.tls.ca_file, "PEM CA bundle to verify the server (enables TLS)");
  cmd->add_option("--tls-cert", flags.tls.cert_file, "PEM client certificate (mutual TLS)");
  cmd->add_option("--tls-key", flags.tls.key_file, "PEM client key (mutual TLS)");
}

}  // namespace corral::cli
