// The cluster's rate limiter as another service's coroutines see it (the scheduler's, the sandbox API's): a permit of a
// named limit (the tool limit for one execution, the LLM limit for one call), held until released. LimiterClient
// (limiter_client.h) implements it over the ratelimiter's session stream; tests use FakeLimiter
// (testing/fake_limiter.h). Thread-safe.
#pragma once

#include <string>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "boost/asio/awaitable.hpp"
#include "libs/async/stop_signal.h"

namespace corral::ratelimiter {

// A held permit: given back by Release() or when destroyed. A default-constructed one holds nothing.
class Permit {
 public:
  Permit() = default;
  explicit Permit(absl::AnyInvocable<void()> release) : release_(std::move(release)) {}
  Permit(Permit&& other) noexcept : release_(std::exchange(other.release_, nullptr)) {}
  Permit& operator=(Permit&& other) noexcept {
    if (this != &other) {
      Release();
      release_ = std::exchange(other.release_, nullptr);
    }
    return *this;
  }
  ~Permit() { Release(); }
  void Release() {
    if (auto release = std::exchange(release_, nullptr)) release();
  }
  bool held() const { return static_cast<bool>(release_); }

 private:
  absl::AnyInvocable<void()> release_;
};

class LimiterApi {
 public:
  virtual ~LimiterApi() = default;
  // A permit of `limit` for `key`, waiting up to `wait` (DEADLINE_EXCEEDED after). A stop of `control`
  // withdraws the request (CANCELLED).
  virtual boost::asio::awaitable<absl::StatusOr<Permit>> Acquire(std::string limit, std::string key,
                                                                 absl::Duration wait, async::StopSignal* control) = 0;
};

}  // namespace corral::ratelimiter
