// An in-memory rate limiter for other services' unit tests: every request is granted at once, or refused with the
// status the test sets. Counts the permits held, so a test sees every permit given back. Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "services/ratelimiter/client/limiter_api.h"

namespace corral::ratelimiter {

class FakeLimiter final : public LimiterApi {
 public:
  void Refuse(absl::Status status) {
    absl::MutexLock lock(&state_->mu);
    state_->refusal = std::move(status);
  }
  int held(const std::string& limit) const {
    absl::MutexLock lock(&state_->mu);
    auto it = state_->held.find(limit);
    return it == state_->held.end() ? 0 : it->second;
  }
  int granted(const std::string& limit) const {
    absl::MutexLock lock(&state_->mu);
    auto it = state_->granted.find(limit);
    return it == state_->granted.end() ? 0 : it->second;
  }

  boost::asio::awaitable<absl::StatusOr<Permit>> Acquire(std::string limit, std::string, absl::Duration,
                                                         async::StopSignal*) override {
    absl::MutexLock lock(&state_->mu);
    if (!state_->refusal.ok()) co_return state_->refusal;
    ++state_->held[limit];
    ++state_->granted[limit];
    co_return Permit([state = state_, limit] {
      absl::MutexLock release_lock(&state->mu);
      --state->held[limit];
    });
  }

 private:
  struct State {
    mutable absl::Mutex mu;
    absl::Status refusal;
    std::map<std::string, int> held, granted;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace corral::ratelimiter
