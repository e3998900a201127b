// LimiterApi over the ratelimiter's client (one session stream per scheduler, crash-safe leases). Thread-safe.
#pragma once

#include "services/ratelimiter/client/ratelimit_client.h"
#include "services/scheduler/remote/limiter_api.h"

namespace corral::scheduler {

class LimiterClient final : public LimiterApi {
 public:
  // `client` is not null: without a ratelimiter the driver gets no LimiterApi at all.
  explicit LimiterClient(ratelimiter::RateLimitClient* client) : client_(client) {}
  boost::asio::awaitable<absl::StatusOr<Permit>> Acquire(std::string limit, std::string key, absl::Duration wait,
                                                         RunControl* control) override;

 private:
  ratelimiter::RateLimitClient* const client_;
};

}  // namespace corral::scheduler
