#include "services/ratelimiter/client/limiter_client.h"

#include <atomic>
#include <memory>

#include "boost/asio/async_result.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/use_awaitable.hpp"

namespace corral::ratelimiter {

namespace asio = boost::asio;

asio::awaitable<absl::StatusOr<Permit>> LimiterClient::Acquire(std::string limit, std::string key, absl::Duration wait,
                                                               async::StopSignal* control) {
  ratelimiter::PermitRequest request;
  request.limit = std::move(limit);
  request.key = std::move(key);
  request.wait_timeout = wait;
  auto id = std::make_shared<std::atomic<uint64_t>>(0);
  ratelimiter::RateLimitClient* client = client_;
  async::ScopedInterrupt interrupt(control, [client, id] {
    if (uint64_t v = id->load()) client->CancelAcquire(v);
  });
  auto permit =
      co_await asio::async_initiate<decltype(asio::use_awaitable), void(absl::StatusOr<ratelimiter::ScopedPermit>)>(
          [&](auto handler) {
            auto h = std::make_shared<decltype(handler)>(std::move(handler));
            id->store(client->AcquireAsync(request, [h](absl::StatusOr<ratelimiter::ScopedPermit> granted) {
              auto executor = asio::get_associated_executor(*h);
              auto shared = std::make_shared<absl::StatusOr<ratelimiter::ScopedPermit>>(std::move(granted));
              asio::post(executor, [h, shared]() mutable { (*h)(std::move(*shared)); });
            }));
          },
          asio::use_awaitable);
  if (!permit.ok()) co_return permit.status();
  co_return Permit([held = *std::move(permit)]() mutable { (void)held.Release(); });
}

}  // namespace corral::ratelimiter
