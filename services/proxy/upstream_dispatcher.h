// Sends one call to an upstream: picks it (UpstreamPool: sticky by env_id, then the least loaded available),
// sends over a pooled keep-alive connection, and only before the first response byte retries elsewhere with
// jittered, doubling back-off (an upstream's 5xx, a refused or dropped connection, a timeout). While the
// upstream has not answered, `on_wait` runs every keepalive interval (the HTTP side writes SSE comments to a
// streaming agent). The chosen upstream counts the call as outstanding for as long as the caller holds the
// returned lease. Where the upstream or the model has quotas, the call first waits for them (quotas.h); an
// upstream's 429 then holds the quota and the call waits its turn again, without counting as an attempt.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "boost/asio/awaitable.hpp"
#include "libs/core/clock.h"
#include "libs/http/client.h"
#include "services/proxy/generation_gate.h"
#include "services/proxy/metrics.h"
#include "services/proxy/quotas.h"
#include "services/proxy/upstreams.h"

namespace corral::proxy {

struct RelayOptions {
  absl::Duration connect_timeout = absl::Seconds(2);
  absl::Duration first_byte_timeout = absl::Minutes(10);  // upstream response header (includes queueing)
  absl::Duration idle_timeout = absl::Minutes(5);         // between response pieces
  absl::Duration keepalive_interval = absl::Seconds(5);   // SSE comments while waiting for the first byte
  int max_attempts = 3;
  absl::Duration retry_backoff = absl::Milliseconds(50);  // jittered, doubled per attempt
};

// A call counted against an upstream's outstanding calls (least-loaded picking) until destroyed. Move-only.
class UpstreamLease {
 public:
  UpstreamLease() = default;
  explicit UpstreamLease(Upstream* upstream);
  UpstreamLease(UpstreamLease&& other) noexcept : upstream_(std::exchange(other.upstream_, nullptr)) {}
  UpstreamLease& operator=(UpstreamLease&& other) noexcept;
  UpstreamLease(const UpstreamLease&) = delete;
  UpstreamLease& operator=(const UpstreamLease&) = delete;
  ~UpstreamLease() { reset(); }
  void reset();
  Upstream* get() const { return upstream_; }
  explicit operator bool() const { return upstream_ != nullptr; }

 private:
  Upstream* upstream_ = nullptr;
};

struct DispatchRequest {
  std::string env_id;
  std::string model;  // after the session's aliasing
  std::string route;  // "/v1/chat/completions"
  std::string body;   // JSON, as the upstream gets it
  bool stream = false;
  // The call's registration at the generation gate: a pause in ABORT mode cuts the request through it
  // (`gate->aborted`), and then no other upstream is tried and no connection is returned.
  GenerationGate::Call* gate = nullptr;
  int64_t estimated_tokens = 0;  // what a token quota is charged up front (EstimateTokens)
};

struct Dispatch {
  // The upstream's response with status and headers read (its body comes next); null when no upstream
  // answered, and then `http_status` (502, 503, 504) and `error` say why.
  std::unique_ptr<http::ClientConnection> connection;
  UpstreamLease lease;  // the upstream that answered
  int attempts = 0;
  int http_status = 0;
  std::string error;
  absl::Time upstream_start;  // of the last attempt
  absl::Time first_byte;      // response header received
  absl::Duration waited;      // on upstreams, over all attempts
  QuotaHold quota;            // the upstream's and the model's quotas, held for the call (settle with its usage)
};

// Thread-safe; one per proxy.
class UpstreamDispatcher {
 public:
  UpstreamDispatcher(UpstreamPool* upstreams, ProxyMetrics* metrics, Clock* clock, RelayOptions options,
                     Quotas* quotas = nullptr)
      : upstreams_(upstreams), metrics_(metrics), clock_(clock), options_(options), quotas_(quotas) {}

  using OnWait = std::function<boost::asio::awaitable<void>()>;
  boost::asio::awaitable<Dispatch> Send(const DispatchRequest& request, OnWait on_wait);
  // A connection whose response was read to the end goes back to the pool for the next call.
  void Return(std::unique_ptr<http::ClientConnection> connection) { pool_.Put(std::move(connection)); }
  // Closes pooled connections; call once the HTTP server has stopped, before its I/O contexts are destroyed.
  void Shutdown() { pool_.Clear(); }

  const RelayOptions& options() const { return options_; }
  // What a call with this body is charged on token quotas up front (0 when the proxy has no quotas).
  int64_t EstimateTokens(const boost::json::object& body, size_t body_bytes) const {
    return quotas_ != nullptr && quotas_->enabled()
               ? proxy::EstimateTokens(body, body_bytes, quotas_->options().default_max_tokens)
               : 0;
  }

 private:
  // One attempt on `u`: sends, with `on_wait` while waiting; a pooled connection the upstream had closed is
  // retried once on a fresh one.
  boost::asio::awaitable<absl::StatusOr<std::unique_ptr<http::ClientConnection>>> Attempt(
      Upstream& u, http::Request& request, bool stream, const OnWait& on_wait, GenerationGate::Call* gate);

  UpstreamPool* const upstreams_;
  ProxyMetrics* const metrics_;
  Clock* const clock_;
  const RelayOptions options_;
  Quotas* const quotas_;
  http::ConnectionPool pool_;
};

}  // namespace corral::proxy
