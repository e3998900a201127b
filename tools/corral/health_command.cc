// `corral version` and `corral health ADDR`: which Corral service answers at an address, and whether it
// is serving (grpc.health.v1).
#include <iostream>
#include <string>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "libs/core/version.h"
#include "libs/rpc/channel.h"
#include "tools/corral/commands.h"

namespace corral::cli {
namespace {

using ::grpc::health::v1::Health;
using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;

// Every service a Corral binary can host; `corral health` asks about each and prints those that exist.
const char* const kCorralServices[] = {"corral.v1.RateLimiter", "corral.v1.SandboxHost", "corral.v1.Proxy",
                                       "corral.v1.Scheduler"};

struct HealthOptions {
  std::string address;
  std::string service;
  double timeout_s = 5;
  TlsConfig tls;
};

grpc::Status Check(Health::Stub& stub, const std::string& service, double timeout_s, HealthCheckResponse* response) {
  grpc::ClientContext context;
  SetDeadline(context, absl::Seconds(timeout_s));
  HealthCheckRequest request;
  request.set_service(service);
  return stub.Check(&context, request, response);
}

int RunHealth(const HealthOptions& options) {
  ChannelOptions channel_options;
  channel_options.tls = options.tls;
  channel_options.retry_unavailable = false;
  auto channel = MakeChannel(options.address, channel_options);
  if (!channel.ok()) {
    std::cerr << "corral health: " << channel.status().message() << "\n";
    return 1;
  }
  auto stub = Health::NewStub(*channel);
  std::vector<std::string> names;
  if (!options.service.empty()) {
    names.push_back(options.service);
  } else {
    names.assign(std::begin(kCorralServices), std::end(kCorralServices));
  }
  int found = 0;
  bool all_serving = true;
  for (const std::string& name : names) {
    HealthCheckResponse response;
    grpc::Status status = Check(*stub, name, options.timeout_s, &response);
    if (status.error_code() == grpc::StatusCode::NOT_FOUND && options.service.empty()) continue;
    if (!status.ok()) {
      std::cerr << "corral health: " << options.address << ": " << status.error_message() << " (code "
                << status.error_code() << ")\n";
      return 1;
    }
    ++found;
    all_serving &= response.status() == HealthCheckResponse::SERVING;
    std::cout << options.address << "  " << name << "  " << HealthCheckResponse::ServingStatus_Name(response.status())
              << "\n";
  }
  if (found == 0) {
    // Not a Corral service: report the server as a whole.
    HealthCheckResponse response;
    grpc::Status status = Check(*stub, "", options.timeout_s, &response);
    if (!status.ok()) {
      std::cerr << "corral health: " << options.address << ": " << status.error_message() << "\n";
      return 1;
    }
    all_serving = response.status() == HealthCheckResponse::SERVING;
    std::cout << options.address << "  (server)  " << HealthCheckResponse::ServingStatus_Name(response.status())
              << "\n";
  }
  return all_serving ? 0 : 1;
}

}  // namespace

void RegisterVersion(CLI::App& app, int& exit_code) {
  app.add_subcommand("version", "print Corral's version")->callback([&exit_code] {
    std::cout << "corral " << kVersion << "\n";
    exit_code = 0;
  });
}

void RegisterHealth(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<HealthOptions>();
  CLI::App* cmd =
      app.add_subcommand("health",
                         "check a service's gRPC health; prints each Corral service found at ADDR and its status; "
                         "exit 0 only if all are SERVING");
  cmd->add_option("address", options->address, "HOST:PORT of a Corral service")->required();
  cmd->add_option("--service", options->service, "check only this gRPC service name");
  cmd->add_option("--timeout", options->timeout_s, "seconds to wait for each answer")->capture_default_str();
  cmd->add_option("--tls-ca", options->tls.ca_file, "PEM CA bundle to verify the server (enables TLS)");
  cmd->add_option("--tls-cert", options->tls.cert_file, "PEM client certificate (mutual TLS)");
  cmd->add_option("--tls-key", options->tls.key_file, "PEM client key (mutual TLS)");
  cmd->callback([options, &exit_code] { exit_code = RunHealth(*options); });
}

}  // namespace corral::cli
