// The proxy's OpenAI-compatible HTTP side: routes by `Authorization: Bearer <env token>` to a session, applies
// its policy, relays the call to an upstream (retrying elsewhere only before the first response byte), streams
// SSE through event by event with a flush per event — SSE comment keepalives while the upstream has not
// answered — records the call in the session's trajectory and journals it before the response's last byte.
#pragma once

#include <string>

#include "absl/time/time.h"
#include "libs/core/clock.h"
#include "libs/http/client.h"
#include "libs/http/server.h"
#include "services/proxy/metrics.h"
#include "services/proxy/proxy_journal.h"
#include "services/proxy/sessions.h"
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

class HttpHandler {
 public:
  HttpHandler(SessionStore* sessions, UpstreamPool* upstreams, ProxyJournal* journal, ProxyMetrics* metrics,
              Clock* clock, RelayOptions options)
      : sessions_(sessions), upstreams_(upstreams), journal_(journal), metrics_(metrics), clock_(clock),
        options_(options) {}

  boost::asio::awaitable<void> Handle(http::Request& request, http::Responder& responder);

  // Active health checks: GET /health on every upstream every `interval`, forever (spawn on an executor).
  boost::asio::awaitable<void> HealthLoop(absl::Duration interval);
  // Closes pooled upstream connections; call once the HTTP server has stopped, before it is destroyed (the
  // connections belong to its I/O contexts).
  void Shutdown() { pool_.Clear(); }

 public:
  struct Call;  // one call in progress (http_handler.cc)

 private:
  boost::asio::awaitable<void> Completion(http::Request& request, http::Responder& responder,
                                          std::shared_ptr<Session> session, bool chat);
  boost::asio::awaitable<void> Models(http::Responder& responder, const Session& session);
  // Connects and sends, retrying on another upstream before any response byte; keepalives meanwhile.
  boost::asio::awaitable<std::unique_ptr<http::ClientConnection>> Dispatch(Call& call, http::Responder& responder);
  boost::asio::awaitable<void> RelayWhole(Call& call, http::ClientConnection& upstream, http::Responder& responder);
  boost::asio::awaitable<void> RelayStream(Call& call, http::ClientConnection& upstream, http::Responder& responder);
  // Records the call, journals it, then tells the agent (error events / bodies as needed).
  boost::asio::awaitable<absl::Status> Finish(Call& call);
  boost::asio::awaitable<void> Fail(Call& call, http::Responder& responder, int status, const std::string& type,
                                    const std::string& message);

  SessionStore* const sessions_;
  UpstreamPool* const upstreams_;
  ProxyJournal* const journal_;
  ProxyMetrics* const metrics_;
  Clock* const clock_;
  const RelayOptions options_;
  http::ConnectionPool pool_;
};

}  // namespace corral::proxy
