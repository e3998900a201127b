#include "libs/rpc/tls.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "libs/core/config.h"
#include "libs/core/status_macros.h"

namespace corral {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::FailedPreconditionError(absl::StrCat("cannot read TLS ", what, " file '", path, "'"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (buffer.str().find("-----BEGIN") == std::string::npos) {
    return absl::FailedPreconditionError(absl::StrCat("TLS ", what, " file '", path, "' is not PEM"));
  }
  return buffer.str();
}

}  // namespace

void RegisterTlsFlags(ConfigSchema& schema, const std::string& prefix, TlsConfig* tls) {
  schema.String(prefix + ".cert_file", &tls->cert_file, "PEM certificate chain; enables TLS");
  schema.String(prefix + ".key_file", &tls->key_file, "PEM private key of the certificate");
  schema.String(prefix + ".ca_file", &tls->ca_file, "PEM CA bundle that verifies the peer");
  schema.Bool(prefix + ".require_client_cert", &tls->require_client_cert,
              "server: require and verify client certificates (mutual TLS)");
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsConfig& tls) {
  if (!tls.enabled()) {
    if (tls.require_client_cert) {
      return absl::InvalidArgumentError("tls.require_client_cert needs tls.cert_file, tls.key_file and tls.ca_file");
    }
    return grpc::InsecureServerCredentials();
  }
  if (tls.cert_file.empty() || tls.key_file.empty()) {
    return absl::InvalidArgumentError("server TLS needs both tls.cert_file and tls.key_file");
  }
  if (tls.require_client_cert && tls.ca_file.empty()) {
    return absl::InvalidArgumentError("mutual TLS (tls.require_client_cert) needs tls.ca_file to verify clients");
  }
  grpc::SslServerCredentialsOptions options(tls.require_client_cert
                                                ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                                : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  CORRAL_ASSIGN_OR_RETURN(pair.private_key, ReadPem(tls.key_file, "key"));
  CORRAL_ASSIGN_OR_RETURN(pair.cert_chain, ReadPem(tls.cert_file, "certificate"));
  options.pem_key_cert_pairs.push_back(std::move(pair));
  if (!tls.ca_file.empty()) {
    CORRAL_ASSIGN_OR_RETURN(options.pem_root_certs, ReadPem(tls.ca_file, "CA"));
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const TlsConfig& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError("a client certificate needs both tls.cert_file and tls.key_file");
  }
  grpc::SslCredentialsOptions options;
  if (!tls.ca_file.empty()) {
    CORRAL_ASSIGN_OR_RETURN(options.pem_root_certs, ReadPem(tls.ca_file, "CA"));
  }
  if (!tls.cert_file.empty()) {
    CORRAL_ASSIGN_OR_RETURN(options.pem_private_key, ReadPem(tls.key_file, "key"));
    CORRAL_ASSIGN_OR_RETURN(options.pem_cert_chain, ReadPem(tls.cert_file, "certificate"));
  }
  return grpc::SslCredentials(options);
}

}  // namespace corral
