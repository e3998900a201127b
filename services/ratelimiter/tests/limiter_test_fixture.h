// The Limiter's unit-test fixture: a limiter on a FakeClock with its metrics, and helpers to declare limits and
// acquire. Shared by limiter_test.cc (grants, queues, rates, keys) and limiter_restart_test.cc (learning mode,
// durable leases).
#pragma once

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/fake_clock.h"
#include "libs/core/testing/status_matchers.h"
#include "services/ratelimiter/limiter.h"

namespace corral::ratelimiter {

constexpr char kKey[] = "0123456789abcdef0123456789abcdef";

// Records what an Acquire's callback received.
struct Outcome {
  bool done = false;
  absl::StatusOr<Grant> result = absl::UnknownError("not called");
};

class LimiterTest : public ::testing::Test {
 protected:
  explicit LimiterTest(bool learning = false) { Reset(learning); }

  void Reset(bool learning) {
    limiter_.reset();
    LimiterOptions options;
    options.learning_mode = learning;
    options.default_lease_ttl = absl::Seconds(30);
    options.max_lease_ttl = absl::Minutes(5);
    limiter_ = std::make_unique<Limiter>(&clock_, *TokenSigner::FromKey(kKey), options, &metrics_);
  }

  LimitSpec Concurrency(const std::string& name, int64_t permits) {
    LimitSpec spec;
    spec.name = name;
    spec.kind = LimitKind::kConcurrency;
    spec.permits = permits;
    return spec;
  }

  LimitSpec Rate(const std::string& name, double rate_per_s, int64_t burst) {
    LimitSpec spec;
    spec.name = name;
    spec.kind = LimitKind::kRate;
    spec.rate_per_s = rate_per_s;
    spec.burst = burst;
    return spec;
  }

  // A lease granted by a limiter (same secret) that ran before a "restart".
  std::string LeaseFromBeforeRestart(const std::string& limit, int64_t capacity, int64_t permits) {
    FakeClock old_clock;
    prometheus::Registry r;
    RateLimiterMetrics m(r);
    Limiter old(&old_clock, *TokenSigner::FromKey(kKey), LimiterOptions{.learning_mode = false}, &m);
    EXPECT_THAT(old.CreateLimit(Concurrency(limit, capacity)), IsOk());
    AcquireParams p;
    p.limit = limit;
    p.permits = permits;
    std::string lease;
    old.Acquire(p, [&](absl::StatusOr<Grant> g) { lease = g->lease_id; }).IgnoreError();
    return lease;
  }

  // Acquire that records into a fresh Outcome owned by the fixture.
  std::shared_ptr<Outcome> Acquire(AcquireParams p, absl::StatusOr<AcquireTicket>* ticket_out = nullptr) {
    auto outcome = std::make_shared<Outcome>();
    auto ticket = limiter_->Acquire(std::move(p), [outcome](absl::StatusOr<Grant> g) {
      outcome->done = true;
      outcome->result = std::move(g);
    });
    if (ticket_out) *ticket_out = ticket;
    if (!ticket.ok()) {
      outcome->done = true;
      outcome->result = ticket.status();
    }
    return outcome;
  }

  std::shared_ptr<Outcome> Acquire(const std::string& limit, int64_t permits,
                                   absl::Duration wait = absl::InfiniteDuration(), const std::string& session = "") {
    AcquireParams p;
    p.limit = limit;
    p.permits = permits;
    p.wait_timeout = wait;
    p.session_id = session;
    return Acquire(p);
  }

  InstanceStatus Instance(const std::string& limit, const std::string& key = "") {
    for (const auto& i : limiter_->Status(limit).instances) {
      if (i.key == key) return i;
    }
    ADD_FAILURE() << "no instance " << limit << "/" << key;
    return {};
  }

  FakeClock clock_;
  prometheus::Registry registry_;
  RateLimiterMetrics metrics_{registry_};
  std::unique_ptr<Limiter> limiter_;
};

}  // namespace corral::ratelimiter
