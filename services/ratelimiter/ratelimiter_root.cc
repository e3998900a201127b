#include "services/ratelimiter/ratelimiter_root.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace corral::ratelimiter {

absl::StatusOr<std::unique_ptr<RateLimiterRoot>> RateLimiterRoot::Build(Config config) {
  auto secret = LoadClusterSecret(config.server);
  if (!secret.ok()) return secret.status();
  auto root = std::unique_ptr<RateLimiterRoot>(new RateLimiterRoot(std::move(config), *std::move(secret)));
  if (absl::Status s = root->Open(); !s.ok()) return s;
  return root;
}

RateLimiterRoot::RateLimiterRoot(Config config, TokenSigner secret)
    : config_(std::move(config)),
      secret_(std::move(secret)),
      auth_(MakeCallAuthenticator(config_.server, secret_)),
      runner_("ratelimiter", config_.server),
      metrics_(*runner_.registry()),
      state_(ResolveStatePath(config_)) {}

absl::Status RateLimiterRoot::Open() {
  LeaseSnapshot::Contents restored;
  if (state_.path.empty()) {
    spdlog::warn("no lease snapshot ({}): every start learns for max_lease_ttl", state_.origin);
  } else if (LeaseSnapshot::MissingWhereExpected(state_.path)) {
    spdlog::error(
        "lease snapshot {} is missing but its change log is there ({}-log.*): starting in learning mode "
        "(remove the log files to start afresh)",
        state_.path, state_.path);
    config_.limiter.learning_mode = true;
  } else {
    auto opened = LeaseSnapshot::Open(state_.path, &metrics_.snapshot_write_errors());
    if (!opened.ok() && opened.status().code() == absl::StatusCode::kFailedPrecondition) return opened.status();
    auto contents = opened.ok() ? (*opened)->Load() : absl::StatusOr<LeaseSnapshot::Contents>(opened.status());
    if (contents.ok()) {
      snapshot_ = *std::move(opened);
      restored = *std::move(contents);
      config_.limiter.learning_mode = false;
    } else {
      spdlog::error("{}; starting in learning mode instead", contents.status());
      config_.limiter.learning_mode = true;
    }
  }
  limiter_ = std::make_unique<Limiter>(&clock_, secret_, config_.limiter, &metrics_, snapshot_.get());
  for (const auto& spec : config_.limits) {
    if (auto s = limiter_->CreateLimit(spec); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("cannot declare limit: ", s.message()));
    }
    spdlog::info("limit '{}{}{}': {} {}", spec.name, spec.keyed() ? "/" : "", spec.key_template,
                 LimitKindName(spec.kind),
                 spec.kind == LimitKind::kConcurrency ? absl::StrCat(spec.permits, " permits")
                                                      : absl::StrCat(spec.rate_per_s, "/s burst ", spec.burst));
  }
  if (snapshot_ != nullptr) {
    const int held = limiter_->Restore(restored.leases, restored.last_alive, restored.fencing_high_water);
    spdlog::info("lease snapshot {} ({}): {} lease(s) still held from before this start; granting at once", state_.path,
                 state_.origin, held);
  } else if (config_.limiter.learning_mode) {
    spdlog::warn(
        "learning mode for {}: only re-claims are granted until then (set state_path to keep leases on "
        "disk and skip it)",
        absl::FormatDuration(config_.limiter.max_lease_ttl));
  }
  service_ = std::make_unique<RateLimitService>(limiter_.get(), &auth_);
  runner_.AddService(service_.get(), "corral.v1.RateLimiter");
  runner_.set_before_drain([this] { limiter_->PrepareShutdown(); });
  return absl::OkStatus();
}

int RateLimiterRoot::Run() {
  if (auto s = runner_.Start(); !s.ok()) {
    spdlog::error("cannot start: {}", s);
    return 1;
  }
  runner_.Wait();
  return 0;
}

RateLimiterRoot::~RateLimiterRoot() {
  clock_.Stop();  // no timer callback may run into the limiter while it is destroyed
}

}  // namespace corral::ratelimiter
