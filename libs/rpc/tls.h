// TLS settings shared by servers and client channels. All PEM files; empty fields mean "not used".
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace corral {

class ConfigSchema;

struct TlsConfig {
  std::string cert_file;             // this side's certificate chain
  std::string key_file;              // this side's private key
  std::string ca_file;               // CA bundle that verifies the peer
  bool require_client_cert = false;  // server only: mutual TLS

  bool enabled() const { return !cert_file.empty() || !key_file.empty() || !ca_file.empty(); }
};

// Registers tls.cert_file, tls.key_file, tls.ca_file, tls.require_client_cert under `prefix` ("tls").
void RegisterTlsFlags(ConfigSchema& schema, const std::string& prefix, TlsConfig* tls);

// Insecure credentials when TLS is off. FAILED_PRECONDITION naming the file when one cannot be read,
// INVALID_ARGUMENT for an inconsistent combination (a cert without a key, mTLS without a CA).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsConfig& tls);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const TlsConfig& tls);

}  // namespace corral
