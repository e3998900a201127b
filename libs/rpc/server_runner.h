// Runs a service's gRPC server the same way everywhere: callback services plus grpc.health.v1 health and
// server reflection, Prometheus /metrics (with process metrics) on the metrics port, optional TLS, a ready
// file for supervisors, and a clean drain on SIGTERM/SIGINT: health flips to NOT_SERVING, new calls are
// refused, in-flight calls get `shutdown_grace`, then Wait() returns so main can flush and exit 0.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "grpcpp/server.h"
#include "libs/rpc/server_config.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"

namespace corral {

// Blocks SIGTERM and SIGINT in the calling thread and every thread it creates afterwards, so that only
// ServerRunner::Wait() receives them. Call first thing in main(), before any thread exists.
void BlockShutdownSignals();
// Waits (after BlockShutdownSignals) until SIGTERM or SIGINT arrives; returns which. For binaries without a
// ServerRunner (HTTP-only ones).
int WaitForShutdownSignal();

// Thread-compatible: configure and Start from main, then Wait. RequestShutdown may be called from any thread.
class ServerRunner {
 public:
  ServerRunner(std::string service_name, ServerConfig config);
  ~ServerRunner();
  ServerRunner(const ServerRunner&) = delete;
  ServerRunner& operator=(const ServerRunner&) = delete;

  // The registry the service registers its metrics in; exposed on the metrics port.
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // Registers a service (not owned; must outlive the runner) and its health name ("corral.v1.RateLimiter").
  void AddService(grpc::Service* service, std::string health_name);
  // An HTTP listener of the service (host:port), reported in the ready file as "http". Call before Start.
  void set_extra_ready_address(std::string http) { http_address_ = std::move(http); }

  // Runs first when the drain begins (before streams are cancelled), e.g. to keep state for the next start.
  void set_before_drain(std::function<void()> hook) { before_drain_ = std::move(hook); }

  // Binds both ports, starts serving, writes the ready file. INVALID_ARGUMENT / UNAVAILABLE naming the
  // address when a port cannot be bound; FAILED_PRECONDITION if BlockShutdownSignals was not called.
  absl::Status Start();
  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }

  // Blocks until SIGTERM/SIGINT or RequestShutdown(), then drains as described above and returns.
  void Wait();
  void RequestShutdown() { shutdown_requested_ = true; }

 private:
  std::string http_address_;
  std::function<void()> before_drain_;
  absl::Status StartMetrics();
  absl::Status WriteReadyFile() const;
  void Drain(const char* reason);

  const std::string service_name_;
  const ServerConfig config_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::vector<std::pair<grpc::Service*, std::string>> services_;
  std::shared_ptr<prometheus::Collectable> process_metrics_;  // the exposer holds only a weak_ptr
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::unique_ptr<grpc::Server> server_;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  std::atomic<bool> shutdown_requested_{false};
};

}  // namespace corral
