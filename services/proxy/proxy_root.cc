#include "services/proxy/proxy_root.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "libs/async/spawn.h"
#include "libs/core/host_port.h"
#include "spdlog/spdlog.h"

namespace corral::proxy {

absl::StatusOr<std::unique_ptr<ProxyRoot>> ProxyRoot::Build(Config config) {
  auto secret = LoadClusterSecret(config.server);
  if (!secret.ok()) return secret.status();
  auto journal = ProxyJournal::Open(config.journal, config.journal_fsync);
  if (!journal.ok()) return journal.status();
  ChannelOptions limiter_channel;
  limiter_channel.tls = config.server.tls;
  const bool insecure = MakeCallAuthenticator(config.server, *secret).insecure();
  auto limiter = ratelimiter::RateLimitClient::ConnectService(
      config.ratelimiter, insecure ? "" : MintClusterToken(*secret),
      absl::StrCat("proxy ", config.http_listen, " pid ", getpid()), limiter_channel, config.limiter_fail_open);
  if (!limiter.ok()) return limiter.status();
  auto root = std::unique_ptr<ProxyRoot>(
      new ProxyRoot(std::move(config), Prepared{*std::move(secret), *std::move(journal), *std::move(limiter)}));
  if (absl::Status s = root->Open(); !s.ok()) return s;
  return root;
}

ProxyRoot::ProxyRoot(Config config, Prepared p)
    : config_(std::move(config)),
      secret_(std::move(p.secret)),
      auth_(MakeCallAuthenticator(config_.server, secret_)),
      runner_("proxy", config_.server),
      metrics_(*runner_.registry()),
      journal_(std::move(p.journal)),
      sessions_(config_.sessions, &secret_, &clock_),
      upstreams_(config_.upstreams, &clock_, config_.breaker),
      ledger_(&sessions_, journal_.get(), &metrics_, &clock_, &upstreams_, config_.default_model, config_.record),
      limiter_(std::move(p.limiter)),
      quotas_(limiter_.get(), config_.quota, config_.model_quotas, &metrics_, &clock_),
      dispatcher_(&upstreams_, &metrics_, &clock_, config_.relay, &quotas_),
      health_(&upstreams_, &metrics_, &clock_),
      gate_(&policy_version_, &metrics_, &clock_),
      handler_(CallParts{.ledger = &ledger_,
                         .dispatcher = &dispatcher_,
                         .metrics = &metrics_,
                         .clock = &clock_,
                         .policy_version = &policy_version_,
                         .gate = &gate_},
               &upstreams_),
      http_(
          config_.http_limits, [this](http::Request& req, http::Responder& res) { return handler_.Handle(req, res); },
          static_cast<int>(config_.http_threads)) {
  journal_->journal().OnWriteFailed([this](const absl::Status&) { metrics_.journal_errors.Increment(); });
  std::vector<std::string> upstream_names;
  for (const auto* u : upstreams_.all()) upstream_names.push_back(u->spec.name);
  metrics_.SetUpstreams(std::move(upstream_names));
}

absl::Status ProxyRoot::Open() {
  auto restored = journal_->Load(sessions_);
  if (!restored.ok()) {
    return absl::Status(restored.status().code(), absl::StrCat("the journal ", config_.journal,
                                                               " cannot be read: ", restored.status().message()));
  }
  spdlog::info("journal {}: {} sessions restored ({} open)", config_.journal, *restored, sessions_.open_sessions());
  metrics_.open_sessions.Set(static_cast<double>(sessions_.open_sessions()));
  auto port = http_.Listen(config_.http_listen);
  if (!port.ok()) return port.status();
  // (http_listen was validated with the config: it splits.)
  http_address_ = JoinHostPort(SplitHostPort(config_.http_listen)->first, *port);
  if (config_.advertise_url.empty()) config_.advertise_url = absl::StrCat("http://", http_address_, "/v1");
  service_ =
      std::make_unique<ProxyService>(&ledger_, &auth_, config_.advertise_url, &gate_, http_.context().get_executor());
  runner_.AddService(service_.get(), "corral.v1.Proxy");
  runner_.set_extra_ready_address(http_address_);
  return absl::OkStatus();
}

void ProxyRoot::ExpireEachSecond() {
  if (!gate_.paused()) ledger_.Expire();
  clock_.RunAfter(absl::Seconds(1), [this] { ExpireEachSecond(); });
}

int ProxyRoot::Run() {
  async::Spawn(http_.context(), health_.Run(config_.health_interval), "the upstream health checks");
  clock_.RunAfter(absl::Seconds(1), [this] { ExpireEachSecond(); });
  if (auto s = runner_.Start(); !s.ok()) {
    spdlog::error("cannot start: {}", s);
    return 1;
  }
  spdlog::info("proxy: http={} upstreams={} base_url={}{}{}", http_address_, config_.upstreams.size(),
               config_.advertise_url, config_.has_quotas() ? absl::StrCat(" quotas at ", config_.ratelimiter) : "",
               config_.record ? "" : " (record: false: calls are relayed and counted, never recorded)");
  runner_.Wait();
  return 0;
}

ProxyRoot::~ProxyRoot() {
  clock_.Stop();
  http_.Stop();
  // Commits still in flight post their wake-ups to the (stopped) HTTP contexts: let them land before those go.
  (void)journal_->journal().Apply([](sqlite3*) { return absl::OkStatus(); });
  dispatcher_.Shutdown();
}

}  // namespace corral::proxy
