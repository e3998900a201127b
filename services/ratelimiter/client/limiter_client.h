// LimiterApi over the ratelimiter's client (one session stream per client process, crash-safe leases). Thread-safe.
#pragma once

#include "services/ratelimiter/client/limiter_api.h"
#include "services/ratelimiter/client/ratelimit_client.h"

namespace corral::ratelimiter {

class LimiterClient final : public LimiterApi {
 public:
  // `client` is not null: without a ratelimiter the driver gets no LimiterApi at all.
  explicit LimiterClient(ratelimiter::RateLimitClient* client) : client_(client) {}
  boost::asio::awaitable<absl::StatusOr<Permit>> Acquire(std::string limit, std::string key, absl::Duration wait,
                                                         async::StopSignal* control) override;

 private:
  ratelimiter::RateLimitClient* const client_;
};

}  // namespace corral::ratelimiter
