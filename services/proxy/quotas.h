// Quotas at the proxy, shared by every replica through corral-ratelimiter. An upstream or a model names limits
// (QuotaSpec): a rate limit charged one token per request, a rate limit charged the call's tokens — estimated
// up front (prompt bytes / 4 plus max_tokens), corrected by the usage the upstream reports — and a concurrency
// limit held while the call is upstream. A call waits for them in the limiter's FIFO queues (a streaming agent
// gets keepalives meanwhile) up to `max_wait`; beyond it the agent gets HTTP 429. An upstream's own 429 holds
// the request limit for its Retry-After, so every replica slows down, and the call waits its turn again.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "boost/asio/awaitable.hpp"
#include "boost/json/object.hpp"
#include "libs/core/clock.h"
#include "libs/http/client.h"
#include "services/proxy/metrics.h"
#include "services/proxy/upstreams.h"
#include "services/ratelimiter/client/ratelimit_client.h"

namespace corral::proxy {

struct QuotaOptions {
  absl::Duration max_wait = absl::Minutes(1);             // longest a call waits for its quotas (then 429)
  int64_t default_max_tokens = 1024;                      // the completion's estimate when the request sets none
  absl::Duration default_retry_after = absl::Seconds(1);  // an upstream 429 without a Retry-After
};

// One call's quota permits. Concurrency permits go back when it is destroyed; rate charges are spent, except
// what Settle or Refund give back. Move-only.
class QuotaHold {
 public:
  QuotaHold() = default;
  QuotaHold(QuotaHold&&) = default;
  QuotaHold& operator=(QuotaHold&&) = default;

  // Corrects the token charges from the estimate to `used` tokens (a debit or a refund), once.
  void Settle(int64_t used);
  // Gives every rate charge back (the upstream never ran the call) and releases the concurrency permits.
  void Refund();
  // Tokens charged on each token limit (the estimate).
  int64_t charged_tokens() const { return charged_tokens_; }
  // Some permit was granted without the limiter (unreachable, failing open): it holds nothing back.
  bool unlimited() const { return unlimited_; }
  bool empty() const { return charges_.empty() && leases_.empty(); }

 private:
  friend class Quotas;
  struct Charge {
    std::string limit, key;
    int64_t tokens = 0;
    bool per_token = false;  // a token limit (settled), not a request limit
  };
  ratelimiter::RateLimitClient* client_ = nullptr;
  std::vector<ratelimiter::ScopedPermit> leases_;
  std::vector<Charge> charges_;
  int64_t charged_tokens_ = 0;
  bool unlimited_ = false;
  bool settled_ = false;
};

// Thread-safe; one per proxy. With no client every call is unlimited (no quota is configured).
class Quotas {
 public:
  Quotas(ratelimiter::RateLimitClient* client, QuotaOptions options, std::map<std::string, QuotaSpec> by_model,
         ProxyMetrics* metrics, Clock* clock)
      : client_(client), options_(options), by_model_(std::move(by_model)), metrics_(metrics), clock_(clock) {}

  // The quotas of a call of `model` on `upstream`: the upstream's, then the model's; empty when none applies.
  std::vector<const QuotaSpec*> For(const Upstream& upstream, const std::string& model) const;

  // Waits for every quota in `specs` for at most `budget`, running `on_wait` every `tick` meanwhile. Errors:
  // RESOURCE_EXHAUSTED (not before the deadline: the agent is told 429), UNAVAILABLE (the limiter is unreachable
  // and the proxy fails closed), FAILED_PRECONDITION (a limit is missing or refuses the request: a configuration
  // error, the message names it).
  using OnWait = std::function<boost::asio::awaitable<void>()>;
  boost::asio::awaitable<absl::StatusOr<QuotaHold>> Acquire(const std::vector<const QuotaSpec*>& specs,
                                                            const std::string& model, int64_t tokens,
                                                            absl::Duration budget, absl::Duration tick,
                                                            const OnWait& on_wait);
  // The upstream answered 429: hold the request limit of each of `specs` (its token limit when it has none) for
  // `retry_after`. False when none has a rate limit to hold (then the caller waits by itself).
  bool Throttled(const std::vector<const QuotaSpec*>& specs, const std::string& model, absl::Duration retry_after);

  const QuotaOptions& options() const { return options_; }
  // A limiter is configured: calls may have quotas (and their token estimate is worth computing).
  bool enabled() const { return client_ != nullptr; }

 private:
  boost::asio::awaitable<absl::StatusOr<ratelimiter::ScopedPermit>> Wait(ratelimiter::PermitRequest request,
                                                                         absl::Duration tick, const OnWait& on_wait);

  ratelimiter::RateLimitClient* const client_;
  const QuotaOptions options_;
  const std::map<std::string, QuotaSpec> by_model_;
  ProxyMetrics* const metrics_;
  Clock* const clock_;
};

// The tokens a call may cost, charged before it runs: its body's bytes / 4 for the prompt, plus max_tokens (or
// max_completion_tokens, or `default_max_tokens`) for each of its `n` choices.
int64_t EstimateTokens(const boost::json::object& body, size_t body_bytes, int64_t default_max_tokens);
// An upstream 429's wait: `retry-after-ms`, else `retry-after` in seconds, else `fallback`; at most an hour.
absl::Duration RetryAfter(const http::ClientConnection& response, absl::Duration fallback);
// The instance key of `spec` for `model` ("{model}" stands for the model's name).
std::string QuotaKey(const QuotaSpec& spec, const std::string& model);

}  // namespace corral::proxy
