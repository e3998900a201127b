#include "libs/rpc/server_runner.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"
#include "libs/core/status_macros.h"
#include "libs/core/version.h"
#include "libs/process/supervise.h"
#include "libs/rpc/process_metrics.h"
#include "prometheus/gauge.h"
#include "spdlog/spdlog.h"

namespace corral {
namespace {

sigset_t ShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

bool ShutdownSignalsBlocked() {
  sigset_t current;
  pthread_sigmask(SIG_BLOCK, nullptr, &current);
  return sigismember(&current, SIGTERM) == 1 && sigismember(&current, SIGINT) == 1;
}

std::string WithPort(const std::string& listen, int port) {
  auto hp = SplitHostPort(listen);
  std::string host = hp.ok() ? hp->first : "127.0.0.1";
  if (host.find(':') != std::string::npos) host = absl::StrCat("[", host, "]");
  return absl::StrCat(host, ":", port);
}

}  // namespace

void BlockShutdownSignals() {
  sigset_t set = ShutdownSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForShutdownSignal() {
  sigset_t set = ShutdownSignals();
  int sig = 0;
  while (sigwait(&set, &sig) != 0 || (sig != SIGTERM && sig != SIGINT)) {
  }
  return sig;
}

ServerRunner::ServerRunner(std::string service_name, ServerConfig config)
    : service_name_(std::move(service_name)),
      config_(std::move(config)),
      registry_(std::make_shared<prometheus::Registry>()) {}

ServerRunner::~ServerRunner() {
  if (server_ != nullptr) Drain("runner destroyed");
}

void ServerRunner::AddService(grpc::Service* service, std::string health_name) {
  services_.emplace_back(service, std::move(health_name));
}

absl::Status ServerRunner::StartMetrics() {
  CORRAL_ASSIGN_OR_RETURN(auto host_port, SplitHostPort(config_.metrics_listen));
  std::string address = WithPort(config_.metrics_listen, host_port.second);
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(address, /*num_threads=*/1);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for metrics on ", address, ": ", e.what(), "; is the port in use?"));
  }
  prometheus::BuildGauge()
      .Name("corral_build_info")
      .Help("Always 1; labels say which Corral service and version this is.")
      .Register(*registry_)
      .Add({{"service", service_name_}, {"version", kVersion}})
      .Set(1);
  exposer_->RegisterCollectable(registry_);
  process_metrics_ = std::make_shared<ProcessMetrics>();
  exposer_->RegisterCollectable(process_metrics_);
  auto ports = exposer_->GetListeningPorts();
  metrics_port_ = ports.empty() ? host_port.second : ports.front();
  return absl::OkStatus();
}

absl::Status ServerRunner::Start() {
  if (!ShutdownSignalsBlocked()) {
    return absl::FailedPreconditionError("call corral::BlockShutdownSignals() at the top of main()");
  }
  CORRAL_RETURN_IF_ERROR(ValidateServerConfig(config_));
  CORRAL_ASSIGN_OR_RETURN(auto credentials, MakeServerCredentials(config_.tls));
  CORRAL_RETURN_IF_ERROR(StartMetrics());

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config_.grpc_listen, credentials, &grpc_port_);
  // Let clients keep idle connections alive with pings (their channels send one every 20 s).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  for (auto& [service, name] : services_) builder.RegisterService(service);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || grpc_port_ == 0) {
    server_.reset();
    exposer_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot listen for gRPC on ", config_.grpc_listen, "; is the port in use?"));
  }
  for (auto& [service, name] : services_) server_->GetHealthCheckService()->SetServingStatus(name, true);
  CORRAL_RETURN_IF_ERROR(WriteReadyFile());
  spdlog::info("{} serving: grpc={} metrics={} tls={} pid={}", service_name_, WithPort(config_.grpc_listen, grpc_port_),
               WithPort(config_.metrics_listen, metrics_port_),
               config_.tls.enabled() ? (config_.tls.require_client_cert ? "mutual" : "on") : "off", getpid());
  return absl::OkStatus();
}

absl::Status ServerRunner::WriteReadyFile() const {
  if (config_.ready_file.empty()) return absl::OkStatus();
  return corral::WriteReadyFile(config_.ready_file, service_name_,
                                ReadyInfo{getpid(), WithPort(config_.grpc_listen, grpc_port_),
                                          WithPort(config_.metrics_listen, metrics_port_), http_address_});
}

void ServerRunner::Wait() {
  sigset_t set = ShutdownSignals();
  const timespec tick{0, 100'000'000};  // also notice RequestShutdown() within 100 ms
  while (!shutdown_requested_) {
    int sig = sigtimedwait(&set, nullptr, &tick);
    if (sig == SIGTERM || sig == SIGINT) {
      Drain(sig == SIGTERM ? "SIGTERM" : "SIGINT");
      return;
    }
  }
  Drain("shutdown requested");
}

void ServerRunner::Drain(const char* reason) {
  if (server_ == nullptr) return;
  if (before_drain_) before_drain_();
  spdlog::info("{}: {}; draining in-flight calls for up to {}", service_name_, reason,
               absl::FormatDuration(config_.shutdown_grace));
  server_->GetHealthCheckService()->Shutdown();  // every service name reports NOT_SERVING from now on
  server_->Shutdown(absl::ToChronoTime(absl::Now() + config_.shutdown_grace));
  server_->Wait();
  server_.reset();
  spdlog::debug("{}: gRPC server stopped", service_name_);
  exposer_.reset();
  spdlog::info("{}: stopped", service_name_);
}

}  // namespace corral
