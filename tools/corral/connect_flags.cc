#include "tools/corral/connect_flags.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "boost/json.hpp"
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

std::string LocalClusterAddress(const std::string& cluster_dir, const std::string& service, const std::string& field) {
  std::ifstream in(cluster_dir + "/cluster.json");
  std::stringstream text;
  text << in.rdbuf();
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(text.str(), ec);
  const boost::json::object* o = !ec && v.is_object() ? &v.as_object() : nullptr;
  const boost::json::value* svc = o ? o->if_contains(service) : nullptr;
  const boost::json::value* value = svc && svc->is_object() ? svc->as_object().if_contains(field) : nullptr;
  return value != nullptr && value->is_string() ? std::string(value->as_string()) : std::string();
}

absl::Status ConnectFlags::ResolveCluster() {
  if (!address.empty() || cluster_service.empty()) return absl::OkStatus();
  address = LocalClusterAddress(cluster_dir, cluster_service, "grpc");
  if (address.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("no ", cluster_service, " address given and no local cluster (",
                                                      cluster_dir,
                                                      "/cluster.json): pass its HOST:PORT, or start one "
                                                      "with `corral up`"));
  }
  if (secret_file.empty() && token.empty() && std::filesystem::exists(cluster_dir + "/secret")) {
    secret_file = cluster_dir + "/secret";
  }
  return absl::OkStatus();
}

void AddConnectFlags(CLI::App* cmd, ConnectFlags& flags, const std::string& what, const std::string& address_flag,
                     const std::string& cluster_service) {
  flags.cluster_service = cluster_service;
  CLI::Option* address = cmd->add_option(
      address_flag, flags.address,
      "HOST:PORT of the " + what + (cluster_service.empty() ? "" : " (default: the local `corral up` cluster's)"));
  if (cluster_service.empty()) {
    address->required();
  } else {
    cmd->add_option("--cluster-dir", flags.cluster_dir, "the local cluster's directory (corral up --dir)")
        ->capture_default_str();
  }
  cmd->add_option("--secret-file", flags.secret_file,
                  "cluster secret file, to authenticate (not needed for --insecure services)");
  cmd->add_option("--token", flags.token, "bearer token to send instead of minting one from --secret-file");
  cmd->add_option("--rpc-timeout", flags.timeout_s, "seconds to wait for each RPC")->capture_default_str();
  cmd->add_option("--tls-ca", flags.tls.ca_file, "PEM CA bundle to verify the server (enables TLS)");
  cmd->add_option("--tls-cert", flags.tls.cert_file, "PEM client certificate (mutual TLS)");
  cmd->add_option("--tls-key", flags.tls.key_file, "PEM client key (mutual TLS)");
}

}  // namespace corral::cli
