#include "services/sandbox_api/sandbox_api_root.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "libs/core/host_port.h"
#include "libs/core/logging.h"
#include "libs/rpc/channel.h"
#include "services/sandbox_api/http_routes.h"
#include "spdlog/spdlog.h"

namespace corral::sandbox_api {

struct SandboxApiRoot::Prepared {
  std::string token;  // the cluster token, for the scheduler (and hosts, for leases without their own)
  ChannelOptions channel;
  std::shared_ptr<grpc::Channel> scheduler;
  std::unique_ptr<ratelimiter::RateLimitClient> limiter_session;
  std::optional<TokenSigner> secret;  // checks E2B API keys and access tokens
};

absl::StatusOr<std::unique_ptr<SandboxApiRoot>> SandboxApiRoot::Build(Config config) {
  auto secret = LoadClusterSecret(config.server);
  if (!secret.ok()) return secret.status();
  Prepared p;
  p.secret = *secret;
  p.token = config.server.insecure ? "" : MintClusterToken(*secret);
  p.channel.tls = config.server.tls;
  auto scheduler = MakeChannel(config.scheduler, p.channel);
  if (!scheduler.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("scheduler ", config.scheduler, ": ", scheduler.status().message()));
  }
  p.scheduler = *std::move(scheduler);
  auto limiter = ratelimiter::RateLimitClient::ConnectService(config.ratelimiter, p.token, "sandbox-api", p.channel,
                                                              config.limiter_fail_open);
  if (!limiter.ok()) return limiter.status();
  p.limiter_session = *std::move(limiter);
  return std::unique_ptr<SandboxApiRoot>(new SandboxApiRoot(std::move(config), std::move(p)));
}

SandboxApiRoot::SandboxApiRoot(Config config, Prepared p)
    : config_(std::move(config)),
      runner_("sandbox-api", config_.server),
      metrics_(*runner_.registry()),
      leases_(std::move(p.scheduler), p.token, p.channel, &clock_),
      limiter_session_(std::move(p.limiter_session)),
      limiter_(limiter_session_ ? std::make_unique<ratelimiter::LimiterClient>(limiter_session_.get()) : nullptr),
      run_code_(&leases_, limiter_.get(), &clock_,
                RunCodeOptions{.limit = config_.code_limit,
                               .wait = config_.wait,
                               .image = config_.image,
                               .images = config_.images,
                               .executor = config_.executor_name},
                &metrics_),
      e2b_auth_(*std::move(p.secret)),
      templates_(&leases_, &leases_, &e2b_auth_, &clock_),
      e2b_(
          &leases_, &e2b_auth_, &clock_,
          E2bOptions{.image_metadata_key = config_.e2b_image_metadata_key, .prices = config_.prices},
          [this](const std::string& id) {
            envd_.Forget(id);
            code_.Forget(id);
          },
          [this](const v1::SandboxLease& lease) {
            envd_.Remember(lease);
            code_.Remember(lease);
          },
          &templates_),
      envd_(&leases_, &clock_, E2bOptions{.fork_ready = config_.e2b_fork_ready}, &metrics_.e2b_processes),
      code_(&clock_, E2bOptions{.fork_ready = config_.e2b_fork_ready}),
      envd_http_(&envd_, &code_, &e2b_auth_),
      http_(http::ServerLimits{.max_body_bytes = static_cast<size_t>(config_.max_body_bytes)},
            MakeHttpHandler(&run_code_, &e2b_, &envd_http_, &metrics_), static_cast<int>(config_.http_threads)) {}

SandboxApiRoot::~SandboxApiRoot() { http_.Stop(); }

int SandboxApiRoot::Run() {
  auto port = http_.Listen(config_.http_listen);
  if (!port.ok()) {
    spdlog::error("cannot listen on {}: {}", config_.http_listen, port.status());
    return 1;
  }
  const std::string http_address = JoinHostPort(SplitHostPort(config_.http_listen)->first, *port);
  runner_.set_extra_ready_address(http_address);
  if (auto s = runner_.Start(); !s.ok()) {
    spdlog::error("cannot start: {}", s);
    return 1;
  }
  spdlog::info("sandbox API on http://{}: POST /run_code (SandboxFusion), the E2B API; sandboxes from scheduler {}, {}",
               http_address, config_.scheduler,
               config_.ratelimiter.empty() ? "no cluster-wide code limit"
                                           : absl::StrCat("limit ", config_.code_limit, " at ", config_.ratelimiter));
  runner_.Wait();
  http_.Stop();
  spdlog::info("sandbox API stopped");
  return 0;
}

}  // namespace corral::sandbox_api
