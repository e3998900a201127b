// corral-proxy: composition root. Config → journal (restores sessions and calls) → sessions and their ledger →
// the ratelimiter's client when quotas are configured → upstreams, their dispatcher and health checks → HTTP
// handler on its own I/O threads → gRPC session service; runs until SIGTERM.

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "boost/asio/co_spawn.hpp"
#include "libs/async/spawn.h"
#include "libs/core/clock.h"
#include "libs/core/fd_limit.h"
#include "libs/core/host_port.h"
#include "libs/core/logging.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/server_runner.h"
#include "services/proxy/config.h"
#include "services/proxy/health_checker.h"
#include "services/proxy/http_handler.h"
#include "services/proxy/metrics.h"
#include "services/proxy/proxy_journal.h"
#include "services/proxy/proxy_service.h"
#include "services/proxy/session_ledger.h"
#include "services/proxy/upstream_dispatcher.h"
#include "services/ratelimiter/client/ratelimit_client.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  corral::BlockShutdownSignals();
  corral::proxy::Config config;
  if (auto exit_code = corral::LoadServiceConfig(
          "corral-proxy",
          "OpenAI-compatible interception proxy: routes agents' LLM calls by env token to "
          "inference backends, streams without buffering, records exact trajectories.",
          "proxy", config, corral::proxy::RegisterConfig, corral::proxy::ValidateConfig, argc, argv)) {
    return *exit_code;
  }
  // Two descriptors per relayed call (agent and upstream): raise the soft limit to the hard one.
  corral::RaiseOpenFileLimit();
  auto secret = corral::LoadClusterSecret(config.server);
  if (!secret.ok()) {
    spdlog::error("cannot start: {}", secret.status());
    return 1;
  }
  const corral::CallAuthenticator auth = corral::MakeCallAuthenticator(config.server, *secret);
  corral::RealClock clock;
  corral::ServerRunner runner("proxy", config.server);
  corral::proxy::ProxyMetrics metrics(*runner.registry());

  auto journal = corral::proxy::ProxyJournal::Open(config.journal, config.journal_fsync);
  if (!journal.ok()) {
    spdlog::error("cannot start: {}", journal.status());
    return 1;
  }
  (*journal)->journal().OnWriteFailed([&metrics](const absl::Status&) { metrics.journal_errors.Increment(); });
  corral::proxy::SessionStore sessions(config.sessions, &*secret, &clock);
  auto restored = (*journal)->Load(sessions);
  if (!restored.ok()) {
    spdlog::error("cannot start: the journal {} cannot be read: {}", config.journal, restored.status());
    return 1;
  }
  spdlog::info("journal {}: {} sessions restored ({} open)", config.journal, *restored, sessions.open_sessions());
  metrics.open_sessions.Set(static_cast<double>(sessions.open_sessions()));
  // Before the ledger: a session's model is checked against what the upstreams serve when it opens.
  corral::proxy::UpstreamPool upstreams(config.upstreams, &clock);
  corral::proxy::SessionLedger ledger(&sessions, journal->get(), &metrics, &clock, &upstreams, config.default_model);
  corral::ChannelOptions limiter_channel;
  limiter_channel.tls = config.server.tls;
  auto limiter_client = corral::ratelimiter::RateLimitClient::ConnectService(
      config.ratelimiter, auth.insecure() ? "" : corral::MintClusterToken(*secret),
      absl::StrCat("proxy ", config.http_listen, " pid ", getpid()), limiter_channel, config.limiter_fail_open);
  if (!limiter_client.ok()) {
    spdlog::error("cannot start: {}", limiter_client.status());
    return 1;
  }
  std::unique_ptr<corral::ratelimiter::RateLimitClient> limiter = *std::move(limiter_client);
  corral::proxy::Quotas quotas(limiter.get(), config.quota, config.model_quotas, &metrics);
  std::vector<std::string> upstream_names;
  for (const auto* u : upstreams.all()) upstream_names.push_back(u->spec.name);
  metrics.SetUpstreams(std::move(upstream_names));
  corral::proxy::UpstreamDispatcher dispatcher(&upstreams, &metrics, &clock, config.relay, &quotas);
  corral::proxy::HealthChecker health(&upstreams, &metrics);
  corral::proxy::PolicyVersion policy_version;
  corral::proxy::GenerationGate gate(&policy_version, &metrics, &clock);
  corral::proxy::HttpHandler handler(&ledger, &dispatcher, &upstreams, &metrics, &clock, &policy_version, &gate);
  corral::http::HttpServer http(
      config.http_limits,
      [&](corral::http::Request& req, corral::http::Responder& res) { return handler.Handle(req, res); },
      static_cast<int>(config.http_threads));
  auto http_port = http.Listen(config.http_listen);
  if (!http_port.ok()) {
    spdlog::error("cannot start: {}", http_port.status());
    return 1;
  }
  // (http_listen was validated with the config: it splits.)
  const std::string http_address = corral::JoinHostPort(corral::SplitHostPort(config.http_listen)->first, *http_port);
  if (config.advertise_url.empty()) config.advertise_url = absl::StrCat("http://", http_address, "/v1");
  corral::async::Spawn(http.context(), health.Run(config.health_interval), "the upstream health checks");

  // Session TTLs and trajectory retention; not while generation is paused (the agents cannot call meanwhile: the
  // resume moves the open sessions' TTLs by the pause).
  std::function<void()> expire = [&] {
    if (!gate.paused()) ledger.Expire();
    clock.RunAfter(absl::Seconds(1), [&] { expire(); });
  };
  clock.RunAfter(absl::Seconds(1), [&] { expire(); });

  corral::proxy::ProxyService service(&ledger, &auth, config.advertise_url, &gate, http.context().get_executor());
  runner.AddService(&service, "corral.v1.Proxy");
  runner.set_extra_ready_address(http_address);
  if (auto s = runner.Start(); !s.ok()) {
    spdlog::error("cannot start: {}", s);
    return 1;
  }
  spdlog::info("proxy: http={} upstreams={} base_url={}{}", http_address, config.upstreams.size(), config.advertise_url,
               config.has_quotas() ? absl::StrCat(" quotas at ", config.ratelimiter) : "");
  runner.Wait();
  clock.Stop();
  http.Stop();
  // Commits still in flight post their wake-ups to the (stopped) HTTP contexts: let them land before those go.
  (void)(*journal)->journal().Apply([](sqlite3*) { return absl::OkStatus(); });
  dispatcher.Shutdown();
  return 0;
}
